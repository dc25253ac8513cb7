/* once.c - the library-wide lock of first-use builds (once.h) */
#include "base/once.h"

#include <pthread.h>

static pthread_mutex_t lock;
static pthread_once_t lock_made = PTHREAD_ONCE_INIT;

static void make_lock(void) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&lock, &attr);
    pthread_mutexattr_destroy(&attr);
}

void ckpt_once_lock(void) {
    pthread_once(&lock_made, make_lock);
    pthread_mutex_lock(&lock);
}

void ckpt_once_unlock(void) { pthread_mutex_unlock(&lock); }
