/* child.h - run a test case in a forked child with an alarm, so that a
 * crash, a signal or a hang is a failed check, not a dead test binary.
 *
 *     CHECK_EQ_INT(run_child(child_case, &arg, 60), 0);
 */
#ifndef CKPT_TESTS_CHILD_H
#define CKPT_TESTS_CHILD_H

#include <errno.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs fn(arg) in a child with an alarm of `seconds`; returns the child's
 * exit status, or -SIGNAL when it was killed (SIGALRM: it did not finish). */
static inline int run_child(int (*fn)(const void *), const void *arg, unsigned seconds) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1000;
    if (pid == 0) {
        alarm(seconds);
        _exit(fn(arg));
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1001;
    if (WIFSIGNALED(st)) return -WTERMSIG(st);
    return WEXITSTATUS(st);
}

#endif
