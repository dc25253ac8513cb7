"""Shared set-up of the ckpt Python package tests (pytest).

Environment (set by ctest): CKPT_LIB (libckpt.so), PYTHONPATH (python/),
CKPT_CORPUS (the shared real-checkpoint corpus). Tests that take the
`corpus` fixture are the corpus suite (CKPT_TEST_SUITE=corpus, tests/suite.py);
the others run by default. Run by hand from the repository root, after the
README's build, with:
    PYTHONPATH=python /usr/bin/python3 -m pytest -q tests/python
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from suite import CORPUS_SUITE  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.environ.get("CKPT_CORPUS", os.path.join(REPO, "..", "shared", "corpus"))


@pytest.fixture(scope="session")
def corpus():
    if not os.path.isdir(CORPUS):
        pytest.fail("corpus not found at %s (set CKPT_CORPUS)" % CORPUS)
    return CORPUS


@pytest.fixture(scope="session")
def example_pt():
    return os.path.join(REPO, "examples", "train.pt")


def pytest_collection_modifyitems(config, items):
    """Keeps the cases of this run's suite."""
    keep = [i for i in items if ("corpus" in getattr(i, "fixturenames", ())) == CORPUS_SUITE]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep


def pytest_sessionfinish(session, exitstatus):
    # ctest must never see "no tests ran" (exit 5) as anything but a failure
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
