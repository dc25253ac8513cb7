"""pagecache.py - the cold runs of the bench scripts: one file's pages
dropped from the page cache, without root."""
import os


def evict(path):
    """Writes the file's dirty pages back (fsync), then drops its clean ones
    (posix_fadvise(POSIX_FADV_DONTNEED) on the whole file): `fincore FILE`
    shows 0 afterwards, and the next read comes from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
