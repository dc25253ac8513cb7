"""The two suites of a test script. tests/CMakeLists.txt registers a script
that imports this module twice: as py_<dir>_<name>, the cases that need
nothing beside the repository (they use its files or generate what they
need), and, when the corpus is there, as corpus_py_<dir>_<name> with
CKPT_TEST_SUITE=corpus: the cases marked @corpus, which read the real-world
checkpoints of CKPT_CORPUS."""
import os

CORPUS_SUITE = os.environ.get("CKPT_TEST_SUITE") == "corpus"


def corpus(fn):
    """Marks a case that reads the corpus."""
    fn.reads_corpus = True
    return fn


def selected(fn=None, reads_corpus=None):
    """Whether this run includes a case: fn marked @corpus or not, or
    reads_corpus given as such."""
    if reads_corpus is None:
        reads_corpus = getattr(fn, "reads_corpus", False)
    return bool(reads_corpus) == CORPUS_SUITE
