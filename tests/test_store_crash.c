/* test_store_crash.c - the store at fixed kill points and under injected
 * I/O errors (issue 12: commit, commit of a tree, concurrent commits,
 * prune and gc; the commit of a DCP directory generation).
 *
 * Kill points: a child arms the atomic writer's hook (container/atomic.h)
 * to SIGKILL itself at the nth open, write, fsync, rename or remove, for
 * n = 1, 2, ... until the operation finishes without reaching n. After
 * each kill: LATEST names a generation that exists and verifies, every
 * generation that must remain is there and verifies, latest() answers,
 * and gc removes what the killed writer left. Faults: ENOSPC and EIO at
 * every write, fsync, rename and open of a commit reach the caller as
 * CKPT_E_IO naming the error, the previous generation stays intact and
 * LATEST unchanged (unless the error says the generation was committed:
 * then LATEST names a generation that verifies). Deterministic: no
 * timing, no random kill moments. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "container/atomic.h"
#include "ckpt.h"
#define SCRATCH_NAME "crash"
#include "harness.h"
#include "scratch.h"

#define TRAIN_PT CKPT_SRC "/examples/train.pt"

static int verifies(const char *name) {
    ckpt_file *f = NULL;
    int rc = ckpt_open(&f, in_dir(name), NULL);
    if (rc == 0) rc = ckpt_verify(NULL, f);
    ckpt_close(f);
    return rc == 0;
}

/* The file LATEST names ("" when absent). */
static const char *pointer(void) {
    static char buf[512];
    size_t n = 0;
    unsigned char *b = harness_read_file(in_dir("LATEST"), &n);
    buf[0] = '\0';
    if (b && n > 0 && n < sizeof buf) {
        memcpy(buf, b, n - 1); /* without its "\n" */
        buf[n - 1] = '\0';
    }
    free(b);
    return buf;
}

static int temporaries(void) {
    DIR *dp = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (dp && (e = readdir(dp)) != NULL) n += strstr(e->d_name, ".tmp-") != NULL;
    if (dp) closedir(dp);
    return n;
}

/* Generations below step 4 are committed as `old_ext`, the others as
 * `new_ext` (files ".pt", DCP directories ".dcp"). */
static const char *old_ext = ".pt", *new_ext = ".pt";

static const char *gen(uint64_t step) {
    static char name[4][64];
    static int k;
    k = (k + 1) % 4;
    snprintf(name[k], sizeof name[k], "run-%llu%s", (unsigned long long)step,
             step < 4 ? old_ext : new_ext);
    return name[k];
}

static int commit(uint64_t step, uint32_t keep) {
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.keep = keep;
    return ckpt_store_commit(NULL, 0, dir, "run", step, TRAIN_PT, &o);
}

/* A small training state as a tree: the path Python's Store.commit takes. */
static float weights[4096];
static int commit_tree(uint64_t step, uint32_t keep) {
    ckpt_tree *t = NULL;
    ckpt_value *root, *key, *w;
    uint64_t shape[1] = {4096};
    int rc = ckpt_tree_new(&t);
    if (rc == 0) rc = ckpt_tree_dict(&root, t);
    if (rc == 0) rc = ckpt_tree_str(&key, t, "w", 1);
    if (rc == 0) rc = ckpt_tree_tensor(&w, t, CKPT_DT_F32, 1, shape, weights, sizeof weights);
    if (rc == 0) rc = ckpt_tree_set(t, root, key, w);
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.keep = keep;
    if (rc == 0)
        rc = ckpt_store_commit_tree(NULL, 0, dir, "run", step, root, CKPT_FORMAT_TORCH_ZIP, NULL,
                                    &o);
    ckpt_tree_free(t);
    return rc;
}

/* A multi-rank generation: staged, the ranks' files written into the
 * staging directory (the fixture's), committed as a directory. */
static int commit_dcp(uint64_t step, uint32_t keep) {
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.keep = keep;
    ckpt_store_stage *st = NULL;
    int rc = ckpt_store_stage_dir(&st, dir, "run", step, &o);
    if (rc == 0 && copy_dcp(ckpt_store_stage_path(st)) != 0) rc = CKPT_E_IO;
    if (rc == 0) rc = ckpt_store_commit_dir(NULL, 0, st, &o);
    ckpt_store_stage_free(st);
    return rc;
}

/* A file generation, or a directory one, by the step's extension. */
static int commit_any(uint64_t step, uint32_t keep) {
    return strcmp(step < 4 ? old_ext : new_ext, ".dcp") == 0 ? commit_dcp(step, keep)
                                                             : commit(step, keep);
}

typedef int (*commit_fn)(uint64_t step, uint32_t keep);

static unsigned kills; /* kill points reached, reported per test */

/* Runs fn in a child that kills itself at the nth `op`. 1: killed there;
 * 0: it finished (n is past the operation's count); -1: it failed. */
static int killed_at(const char *op, uint64_t n, int (*fn)(const void *), const void *arg) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60); /* a bound on termination, not a timing assertion */
        ckpt_atomic_fail_nth(op, n, -SIGKILL);
        _exit(fn(arg) == 0 ? 0 : 1);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) return ++kills, 1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* After a kill: LATEST verifies and is one of `allowed`; `must` exist and
 * verify; latest() answers; gc leaves no temporary file. */
static void check_store(const char *what, uint64_t n, const char *const *allowed, size_t nallowed,
                        const uint64_t *must, size_t nmust) {
    int ok = 0;
    const char *p = pointer();
    for (size_t i = 0; i < nallowed; i++) ok |= strcmp(p, allowed[i]) == 0;
    if (!ok || !verifies(p)) {
        fprintf(stderr, "  %s at %llu: LATEST names '%s'\n", what, (unsigned long long)n, p);
        CHECK(0);
    }
    for (size_t i = 0; i < nmust; i++) {
        if (!exists(gen(must[i])) || !verifies(gen(must[i]))) {
            fprintf(stderr, "  %s at %llu: %s is gone or corrupt\n", what, (unsigned long long)n,
                    gen(must[i]));
            CHECK(0);
        }
    }
    char path[512];
    CHECK_EQ_INT(ckpt_store_latest(path, sizeof path, dir, NULL), 0);
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.stale_minutes = 0; /* the killed writer's files are unlocked now */
    CHECK_EQ_INT(ckpt_store_gc(NULL, dir, &o), 0);
    CHECK_EQ_INT(temporaries(), 0);
}

static const char *const ops[] = {"open", "write", "fsync", "rename", "remove"};

/* ------------------------------------------------------------ commit */

static uint32_t keep4 = 3; /* keep of the killed commit of step 4 */
static int commit_step4(const void *arg) { return ((commit_fn)(uintptr_t)arg)(4, keep4); }

static void kill_points_commit(commit_fn fn) {
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        for (uint64_t n = 1;; n++) {
            fresh_dir();
            for (uint64_t s = 1; s <= 3; s++) CHECK_EQ_INT(fn(s, 3), 0);
            int r = killed_at(ops[k], n, commit_step4, (const void *)(uintptr_t)fn);
            CHECK(r >= 0);
            /* LATEST moves forward only once run-4 verifies; run-1 (and
             * run-2 with keep 1) may go only after it moved; run-3, its
             * predecessor, stays whatever keep says */
            const char *allowed[] = {gen(3), gen(4)};
            int moved = strcmp(pointer(), gen(4)) == 0;
            uint64_t must[] = {3, 2, 1};
            check_store(ops[k], n, allowed, 2, must, !moved ? 3 : keep4 >= 3 ? 2 : 1);
            if (exists(gen(4))) CHECK(verifies(gen(4)));
            if (r == 0 && keep4 == 1) CHECK(!exists(gen(1)) && !exists(gen(2)));
            remove_dir();
            if (r != 1) break;
        }
    }
}

TEST(kill_points_in_commit) {
    kill_points_commit(commit);
    CHECK(kills > 0);
}
TEST(kill_points_in_commit_tree) {
    kill_points_commit(commit_tree);
    CHECK(kills > 0);
}

/* A multi-rank generation's commit (ckpt_store_stage_dir, the ranks'
 * files, ckpt_store_commit_dir) over directory generations with keep 3
 * and keep 1, then over file generations with keep 1: every open, fsync,
 * rename and remove of staging, commit, LATEST and pruning. */
TEST(kill_points_in_commit_dir) {
    old_ext = new_ext = ".dcp";
    kill_points_commit(commit_dcp);
    keep4 = 1;
    kill_points_commit(commit_dcp);
    old_ext = ".pt";
    kill_points_commit(commit_any);
    keep4 = 3;
    old_ext = new_ext = ".pt";
    CHECK(kills > 0);
}

/* ------------------------------------------------------------ concurrent */

/* Writer A (killed at the nth op) commits step 4 while writer B commits
 * step 5 to the end: LATEST ends at run-5 (it only moves forward), and
 * the three newest committed generations are there. */
TEST(kill_points_in_concurrent_commits) {
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        for (uint64_t n = 1;; n++) {
            fresh_dir();
            for (uint64_t s = 1; s <= 3; s++) CHECK_EQ_INT(commit(s, 3), 0);
            fflush(NULL);
            pid_t b = fork();
            if (b == 0) {
                alarm(60);
                _exit(commit(5, 3) == 0 ? 0 : 1);
            }
            int r = killed_at(ops[k], n, commit_step4, (const void *)(uintptr_t)commit);
            int st;
            while (waitpid(b, &st, 0) < 0 && errno == EINTR) {
            }
            CHECK(r >= 0);
            /* B may lose to A's step-4 check only if it were step 4: it
             * is not, so it always commits */
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
            const char *allowed[] = {gen(5)};
            uint64_t must[3] = {5, 3, 2};
            if (exists(gen(4))) must[2] = 4; /* committed, so among the newest three */
            check_store("concurrent", n, allowed, 1, must, 3);
            remove_dir();
            if (r != 1) break;
        }
    }
    CHECK(kills > 0);
}

/* ------------------------------------------------------------ prune, gc */

static int prune_to_2(const void *arg) {
    (void)arg;
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.keep = 2;
    return ckpt_store_prune(NULL, dir, &o);
}

TEST(kill_points_in_prune) {
    for (uint64_t n = 1;; n++) {
        fresh_dir();
        for (uint64_t s = 1; s <= 5; s++) CHECK_EQ_INT(commit(s, 10), 0);
        int r = killed_at("remove", n, prune_to_2, NULL);
        CHECK(r >= 0);
        const char *allowed[] = {gen(5)};
        uint64_t must[] = {5, 4};
        check_store("prune", n, allowed, 1, must, 2);
        if (r == 0) CHECK(!exists(gen(1)) && !exists(gen(2)) && !exists(gen(3)));
        remove_dir();
        if (r != 1) break;
    }
    CHECK(kills > 0);
}

static int gc_all(const void *arg) {
    (void)arg;
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.stale_minutes = 0;
    return ckpt_store_gc(NULL, dir, &o);
}

TEST(kill_points_in_gc) {
    for (uint64_t n = 1;; n++) {
        fresh_dir();
        for (uint64_t s = 1; s <= 3; s++) CHECK_EQ_INT(commit(s, 3), 0);
        /* three temporary files of writers killed before: one of them while
         * writing a generation */
        for (int i = 0; i < 3; i++) {
            char name[96];
            snprintf(name, sizeof name, ".run-%d.pt.tmp-1-%016x", 7 + i, i);
            FILE *fp = fopen(in_dir(name), "w");
            fputs("partial", fp);
            fclose(fp);
        }
        int r = killed_at("remove", n, gc_all, NULL);
        CHECK(r >= 0);
        const char *allowed[] = {gen(3)};
        uint64_t must[] = {1, 2, 3};
        check_store("gc", n, allowed, 1, must, 3);
        remove_dir();
        if (r != 1) break;
    }
    CHECK(kills > 0);
}

/* ------------------------------------------------------------ faults */

static void faults_everywhere(commit_fn fn) {
    static const char *const fault_ops[] = {"open", "write", "fsync", "rename"};
    static const int errs[] = {ENOSPC, EIO};
    for (size_t k = 0; k < sizeof fault_ops / sizeof fault_ops[0]; k++) {
        for (size_t e = 0; e < 2; e++) {
            fresh_dir();
            CHECK_EQ_INT(fn(1, 3), 0);
            for (uint64_t n = 1;; n++) {
                ckpt_atomic_fail_nth(fault_ops[k], n, errs[e]);
                int rc = fn(2, 3);
                ckpt_atomic_fail_nth(fault_ops[k], 0, 0);
                if (rc == 0) break; /* n is past the commit's operations */
                const char *msg = ckpt_error_last()->message;
                if (rc != CKPT_E_IO || !strstr(msg, strerror(errs[e]))) {
                    fprintf(stderr, "  %s %llu (%s): %d %s\n", fault_ops[k], (unsigned long long)n,
                            strerror(errs[e]), rc, msg);
                    CHECK(0);
                }
                CHECK(verifies(gen(1)));
                CHECK_EQ_INT(temporaries(), 0);
                if (strstr(msg, "was committed")) {
                    /* in place and verified (LATEST's rename or the
                     * directory's fsync failed): committed, and LATEST
                     * names a generation that verifies; start again */
                    CHECK(verifies(gen(2)));
                    CHECK(verifies(pointer()));
                    remove_dir();
                    fresh_dir();
                    CHECK_EQ_INT(fn(1, 3), 0);
                } else {
                    CHECK_EQ_STR(pointer(), gen(1));
                    CHECK(!exists(gen(2)));
                }
            }
            CHECK_EQ_STR(pointer(), gen(2));
            remove_dir();
        }
    }
}

TEST(faults_in_commit) { faults_everywhere(commit); }
TEST(faults_in_commit_tree) { faults_everywhere(commit_tree); }
TEST(faults_in_commit_dir) {
    old_ext = new_ext = ".dcp";
    faults_everywhere(commit_dcp);
    old_ext = new_ext = ".pt";
}

#define RUN_KILLS(name)                                                                            \
    do {                                                                                           \
        kills = 0;                                                                                 \
        RUN(name);                                                                                 \
        fprintf(stderr, "%s: killed at %u points\n", #name, kills);                                \
    } while (0)

int main(void) {
    for (size_t i = 0; i < sizeof weights / sizeof weights[0]; i++) weights[i] = (float)i;
    RUN_KILLS(kill_points_in_commit);
    RUN_KILLS(kill_points_in_commit_tree);
    RUN_KILLS(kill_points_in_commit_dir);
    RUN_KILLS(kill_points_in_concurrent_commits);
    RUN_KILLS(kill_points_in_prune);
    RUN_KILLS(kill_points_in_gc);
    RUN(faults_in_commit);
    RUN(faults_in_commit_tree);
    RUN(faults_in_commit_dir);
    return harness_end();
}
