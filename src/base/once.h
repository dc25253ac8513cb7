/* once.h - first-use builds inside a shared ckpt_file
 *
 * A ckpt_file may be read from several threads at once (ckpt.h), yet some
 * of its parts are built on first use: a storage inflated on its first
 * read, the safetensors tree on the first ckpt_file_root, the logical
 * tree on the first ckpt_file_logical_root. Each build writes the file
 * (and its arena), so each runs under this one library-wide lock:
 *
 *     if (!CKPT_ONCE_LOAD(&f->built)) {     // the cheap check, no lock
 *         ckpt_once_lock();
 *         if (!f->built && (rc = build(f)) == 0) CKPT_ONCE_STORE(&f->built, 1);
 *         ckpt_once_unlock();
 *     }
 *
 * The lock is recursive: a build may ask for another (the logical tree
 * reads the safetensors tree). Builds are rare and short next to the
 * reads that follow, so one lock for every file is enough.
 */
#ifndef CKPT_BASE_ONCE_H
#define CKPT_BASE_ONCE_H

void ckpt_once_lock(void);
void ckpt_once_unlock(void);

/* The flag a build sets last and readers check first, without the lock:
 * an acquire load that reads "built" sees everything the build wrote
 * before its release store. For int flags and pointers alike. */
#define CKPT_ONCE_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define CKPT_ONCE_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

#endif
