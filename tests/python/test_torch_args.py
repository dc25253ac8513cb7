"""ckpt.load takes torch.load's arguments as torch.load means them: a
map_location function (storage, location), weights_only. Both were a
TypeError (the function reached Tensor.to; weights_only was no keyword)
for code moved over from torch.load."""
import pytest

import ckpt

torch = pytest.importorskip("torch")


def saved(tmp_path):
    path = tmp_path / "tied.pt"
    w = torch.arange(6.0).reshape(2, 3)
    torch.save({"w": w, "tied": w, "b": torch.arange(3)}, path)
    return path


def test_map_location_function_keeps_the_storage(tmp_path):
    path = saved(tmp_path)
    calls, want_calls = [], []

    def keep(storage, location):  # the classic `lambda storage, loc: storage`
        calls.append(location)
        return storage

    got = ckpt.load(path, map_location=keep)
    want = torch.load(path, map_location=lambda s, loc: want_calls.append(loc) or s,
                      weights_only=False)
    assert sorted(got) == sorted(want) == ["b", "tied", "w"]
    for k in want:
        assert got[k].device == want[k].device == torch.device("cpu"), k
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
    assert got["w"].data_ptr() == got["tied"].data_ptr()  # still one storage
    assert set(calls) == set(want_calls) == {"cpu"}


def test_map_location_function_moves(tmp_path):
    path = saved(tmp_path)

    def to_meta(storage, location):
        return torch.empty(0, device="meta").untyped_storage() \
            if hasattr(torch.Tensor, "untyped_storage") else storage.to("meta")

    if not hasattr(torch.Tensor, "untyped_storage"):
        pytest.skip("torch 1.13: no untyped_storage")
    got = ckpt.load(path, map_location=to_meta)
    for k in got:
        assert got[k].device == torch.device("meta"), k
        assert got[k].shape == torch.load(path, weights_only=False)[k].shape, k
    # None from the function: the saved location (torch's default_restore_location)
    got = ckpt.load(path, map_location=lambda s, loc: None)
    assert all(t.device == torch.device("cpu") for t in got.values())
    with pytest.raises(ckpt.InvalidArgumentError, match="not a storage"):
        ckpt.load(path, map_location=lambda s, loc: "cpu")
    # a tensor is no storage: torch.load raises TypeError (TypedStorage's
    # wrap_storage), ckpt took its device and loaded the file's values
    zeros = torch.zeros(6)
    with pytest.raises(TypeError):
        torch.load(path, map_location=lambda s, loc: zeros, weights_only=False)
    with pytest.raises(ckpt.InvalidArgumentError, match="returned a Tensor, not a storage"):
        ckpt.load(path, map_location=lambda s, loc: zeros)


def test_weights_only(tmp_path):
    path = saved(tmp_path)
    for wo in (True, None):
        got = ckpt.load(path, weights_only=wo)
        assert torch.equal(got["w"], torch.arange(6.0).reshape(2, 3))
    with pytest.raises(ckpt.InvalidArgumentError, match="unsafe_ok=True"):
        ckpt.load(path, weights_only=False)
