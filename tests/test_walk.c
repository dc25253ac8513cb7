/* test_walk.c - the one bounded walker (src/model/walk.c): order, names,
 * roles, the three bounds, cycles (reported as cycles, without recursion),
 * STOP/SKIP and allocation failures. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fail_alloc.h"
#include "harness.h"
#include "base/alloc.h"
#include "base/error.h"
#include "model/flatten.h"
#include "model/value.h"
#include "model/walk.h"

/* Records "name:role" of each entered node, '/' after each left one. */
typedef struct trace {
    char text[4096];
    int skip_depth;   /* SKIP at this depth (-1: never) */
    uint64_t stop_at; /* STOP on this visit (0: never) */
    int prune_depth;  /* PRUNE at this depth (0: never) */
} trace;

static int t_enter(ckpt_walk *w, ckpt_walk_frame *n) {
    trace *t = w->ctx;
    static const char roles[] = "RIKVSP";
    size_t used = strlen(t->text);
    snprintf(t->text + used, sizeof t->text - used, "%s%s:%c", used ? " " : "", w->name,
             roles[n->role]);
    if (t->stop_at && w->visits == t->stop_at) return CKPT_WALK_STOP;
    if ((int)w->depth == t->skip_depth) return CKPT_WALK_SKIP;
    if (t->prune_depth && (int)w->depth == t->prune_depth) return CKPT_WALK_PRUNE;
    return CKPT_WALK_DESCEND;
}

static int t_leave(ckpt_walk *w, ckpt_walk_frame *n) {
    trace *t = w->ctx;
    (void)n;
    size_t used = strlen(t->text);
    snprintf(t->text + used, sizeof t->text - used, "/");
    return 0;
}

static ckpt_value *str(ckpt_arena *a, const char *s) {
    return ckpt_value_new_str(a, CKPT_KIND_STR, s, strlen(s));
}

static int run(trace *t, const ckpt_value *root, unsigned follow) {
    ckpt_walk w;
    ckpt_walk_init(&w, NULL, "f", "m");
    w.names = 1;
    w.follow = follow;
    w.enter = t_enter;
    w.leave = t_leave;
    w.ctx = t;
    t->text[0] = '\0';
    return ckpt_walk_run(&w, root);
}

/* {"a": [1, 2], 7: {"b": 3}} with an OrderedDict state {"m": 4} */
static ckpt_value *sample(ckpt_arena *a) {
    ckpt_value *root = ckpt_value_new(a, CKPT_KIND_DICT), *l = ckpt_value_new(a, CKPT_KIND_LIST),
               *d = ckpt_value_new(a, CKPT_KIND_DICT), *st = ckpt_value_new(a, CKPT_KIND_DICT);
    ckpt_value_append(a, l, ckpt_value_new_int(a, 1));
    ckpt_value_append(a, l, ckpt_value_new_int(a, 2));
    ckpt_value_dict_set(a, d, str(a, "b"), ckpt_value_new_int(a, 3));
    ckpt_value_dict_set(a, root, str(a, "a"), l);
    ckpt_value_dict_set(a, root, ckpt_value_new_int(a, 7), d);
    ckpt_value_dict_set(a, st, str(a, "m"), ckpt_value_new_int(a, 4));
    root->dict_class = CKPT_DICT_ORDERED;
    root->u.dict.state = st;
    return root;
}

TEST(order_names_roles) {
    ckpt_arena a = {0};
    ckpt_value *root = sample(&a);
    trace t = {.skip_depth = -1};
    CHECK_EQ_INT(run(&t, root, 0), 0);
    CHECK_EQ_STR(t.text, ":R a:V a.0:I/ a.1:I// 7:V 7.b:V///");
    /* state and keys */
    CHECK_EQ_INT(run(&t, root, CKPT_WALK_DICT_STATE | CKPT_WALK_KEYS), 0);
    CHECK_EQ_STR(t.text, ":R :K/ a:V a.0:I/ a.1:I// :K/ 7:V 7:K/ 7.b:V// :S :K/ m:V///");
    /* SKIP: no children, no leave */
    t.skip_depth = 1;
    CHECK_EQ_INT(run(&t, root, 0), 0);
    CHECK_EQ_STR(t.text, ":R a:V 7:V/");
    /* PRUNE: no children, but leave */
    t.skip_depth = -1;
    t.prune_depth = 1;
    CHECK_EQ_INT(run(&t, root, 0), 0);
    CHECK_EQ_STR(t.text, ":R a:V/ 7:V//");
    t.prune_depth = 0;
    /* STOP: ends the walk with 0 */
    t.skip_depth = -1;
    t.stop_at = 3;
    CHECK_EQ_INT(run(&t, root, 0), 0);
    CHECK_EQ_STR(t.text, ":R a:V a.0:I");
    ckpt_arena_free(&a);
}

TEST(object_attrs) {
    ckpt_arena a = {0};
    ckpt_value *o = ckpt_value_new_object(&a, "argparse.Namespace");
    ckpt_value *st = ckpt_value_new(&a, CKPT_KIND_DICT),
               *pair = ckpt_value_new(&a, CKPT_KIND_TUPLE);
    ckpt_value_dict_set(&a, st, str(&a, "lr"), ckpt_value_new_float(&a, 0.5));
    ckpt_value_append(&a, pair, st); /* (dict, slots) */
    ckpt_value_append(&a, pair, ckpt_value_new(&a, CKPT_KIND_NONE));
    o->u.obj.state = pair;
    trace t = {.skip_depth = -1};
    CHECK_EQ_INT(run(&t, o, 0), 0);
    CHECK_EQ_STR(t.text, ":R/");
    CHECK_EQ_INT(run(&t, o, CKPT_WALK_OBJECT_ATTRS), 0);
    CHECK_EQ_STR(t.text, ":R lr:V//");
    /* the parts themselves: the state only (no arguments), then both */
    CHECK_EQ_INT(run(&t, o, CKPT_WALK_OBJECT_PARTS), 0);
    CHECK_EQ_STR(t.text, ":R :P 0:I 0.lr:V// 1:I///");
    o->u.obj.args = ckpt_value_new(&a, CKPT_KIND_TUPLE);
    CHECK_EQ_INT(run(&t, o, CKPT_WALK_OBJECT_PARTS), 0);
    CHECK_EQ_STR(t.text, ":R :P/ :P 0:I 0.lr:V// 1:I///");
    ckpt_arena_free(&a);
}

static int count_enter(ckpt_walk *w, ckpt_walk_frame *n) {
    (void)w;
    (void)n;
    return CKPT_WALK_DESCEND;
}

static int walk_rc(const ckpt_value *root, uint32_t max_depth, uint64_t max_visits) {
    ckpt_walk w;
    ckpt_walk_init(&w, NULL, "f", "m");
    w.names = max_depth < 10000; /* "0.0.0..." would pass max_name */
    w.enter = count_enter;
    w.max_depth = max_depth;
    w.max_visits = max_visits;
    return ckpt_walk_run(&w, root);
}

TEST(bounds) {
    ckpt_arena a = {0};
    /* a chain 100000 deep: refused by depth, with no recursion at all
     * (the old walkers recursed once per level) */
    ckpt_value *root = ckpt_value_new(&a, CKPT_KIND_LIST), *cur = root;
    for (int i = 0; i < 100000; i++) {
        ckpt_value *next = ckpt_value_new(&a, CKPT_KIND_LIST);
        ckpt_value_append(&a, cur, next);
        cur = next;
    }
    CHECK_EQ_INT(walk_rc(root, 1000, UINT64_MAX), CKPT_E_LIMIT);
    CHECK(strstr(ckpt_error_last()->message, "nested deeper than 1000") != NULL);
    CHECK_EQ_STR(ckpt_error_last()->file, "f");
    CHECK_EQ_INT(walk_rc(root, 200000, UINT64_MAX), 0);
    /* a DAG of 30 levels, each holding the next twice: 2^31 paths */
    ckpt_value *dag = ckpt_value_new_int(&a, 1);
    for (int i = 0; i < 30; i++) {
        ckpt_value *l = ckpt_value_new(&a, CKPT_KIND_LIST);
        ckpt_value_append(&a, l, dag);
        ckpt_value_append(&a, l, dag);
        dag = l;
    }
    CHECK_EQ_INT(walk_rc(dag, 1000, 1000000), CKPT_E_LIMIT);
    CHECK(strstr(ckpt_error_last()->message, "object graph too large") != NULL);
    /* the default budget follows max_tensors */
    ckpt_limits lim = CKPT_LIMITS_INIT;
    lim.max_tensors = 10;
    CHECK_EQ_INT(ckpt_walk_budget(&lim), 1064);
    lim.max_tensors = UINT64_MAX;
    CHECK(ckpt_walk_budget(&lim) == UINT64_MAX);
    ckpt_arena_free(&a);
}

TEST(cycles) {
    ckpt_arena a = {0};
    /* {"x": [0, <the list itself>]} */
    ckpt_value *root = ckpt_value_new(&a, CKPT_KIND_DICT), *l = ckpt_value_new(&a, CKPT_KIND_LIST);
    ckpt_value_append(&a, l, ckpt_value_new_int(&a, 0));
    ckpt_value_append(&a, l, l);
    ckpt_value_dict_set(&a, root, str(&a, "x"), l);
    CHECK_EQ_INT(walk_rc(root, 1000, UINT64_MAX), CKPT_E_UNSUPPORTED);
    CHECK_EQ_STR(ckpt_error_last()->message, "cyclic reference: \"x.1\" contains itself");
    /* found even when the visit budget runs out first: a big sibling
     * re-walked at every turn of the cycle */
    ckpt_value *big = ckpt_value_new(&a, CKPT_KIND_LIST), *c = ckpt_value_new(&a, CKPT_KIND_LIST);
    for (int i = 0; i < 1000; i++) ckpt_value_append(&a, big, ckpt_value_new_int(&a, i));
    ckpt_value_append(&a, c, big);
    ckpt_value_append(&a, c, c);
    CHECK_EQ_INT(walk_rc(c, 1000, 50000), CKPT_E_UNSUPPORTED);
    CHECK_EQ_STR(ckpt_error_last()->message, "cyclic reference: \"1\" contains itself");
    /* with bounds raised far, the name limit is hit first: still a cycle,
     * found in O(depth log depth) */
    ckpt_walk w;
    ckpt_walk_init(&w, NULL, "f", NULL);
    w.names = 1;
    w.enter = count_enter;
    w.max_depth = 1000000;
    CHECK_EQ_INT(ckpt_walk_run(&w, root), CKPT_E_UNSUPPORTED);
    CHECK_EQ_STR(ckpt_error_last()->message, "cyclic reference: \"x.1\" contains itself");
    w.names = 0;
    w.max_visits = 3000000;
    CHECK_EQ_INT(ckpt_walk_run(&w, root), CKPT_E_UNSUPPORTED);
    CHECK_EQ_STR(ckpt_error_last()->message,
                 "cyclic reference: a container contains itself, 2 levels down");
    /* the flattener refuses it the same way */
    ckpt_flat fl;
    ckpt_limits lim = CKPT_LIMITS_INIT;
    CHECK_EQ_INT(ckpt_flatten(&fl, &a, root, &lim, 1000000, UINT64_MAX, "f", NULL),
                 CKPT_E_UNSUPPORTED);
    /* a shared node is not a cycle */
    ckpt_value *s = ckpt_value_new(&a, CKPT_KIND_LIST),
               *shared = ckpt_value_new(&a, CKPT_KIND_LIST);
    ckpt_value_append(&a, s, shared);
    ckpt_value_append(&a, s, shared);
    CHECK_EQ_INT(walk_rc(s, 1000, UINT64_MAX), 0);
    ckpt_arena_free(&a);
}

TEST(name_limit_and_prefix) {
    ckpt_arena a = {0};
    ckpt_value *root = ckpt_value_new(&a, CKPT_KIND_DICT);
    ckpt_value_dict_set(&a, root, str(&a, "abcdefgh"), ckpt_value_new_int(&a, 1));
    trace t = {.skip_depth = -1};
    ckpt_walk w;
    ckpt_walk_init(&w, NULL, "f", NULL);
    w.names = 1;
    w.enter = t_enter;
    w.ctx = &t;
    w.prefix = "p";
    CHECK_EQ_INT(ckpt_walk_run(&w, root), 0);
    CHECK_EQ_STR(t.text, "p:R p.abcdefgh:V");
    w.max_name = 10; /* "p.abcdefgh" and its NUL: 11 */
    t.text[0] = '\0';
    CHECK_EQ_INT(ckpt_walk_run(&w, root), CKPT_E_LIMIT);
    CHECK(strstr(ckpt_error_last()->message, "flattened name of 10 bytes: expected at most 9") !=
          NULL);
    w.max_name = 11; /* the limit counts the NUL: exactly enough */
    t.text[0] = '\0';
    CHECK_EQ_INT(ckpt_walk_run(&w, root), 0);
    w.max_name = 1; /* the prefix alone is too long */
    t.text[0] = '\0';
    CHECK_EQ_INT(ckpt_walk_run(&w, root), CKPT_E_LIMIT);
    CHECK_EQ_STR(t.text, "");
    w.max_name = 2;
    t.text[0] = '\0';
    CHECK_EQ_INT(ckpt_walk_run(&w, root), CKPT_E_LIMIT);
    CHECK_EQ_STR(t.text, "p:R");
    /* the rule itself, and sizes whose sum would overflow */
    CHECK_EQ_INT(ckpt_walk_name_check(4, 3, 0, "f", "m", 7), 0);
    CHECK_EQ_INT(ckpt_walk_name_check(4, 1, 2, "f", "m", 7), 0);
    CHECK_EQ_INT(ckpt_walk_name_check(4, 2, 2, "f", "m", 7), CKPT_E_LIMIT);
    CHECK_EQ_INT(ckpt_error_last()->offset, 7);
    CHECK_EQ_INT(ckpt_walk_name_check(4, 2, SIZE_MAX, "f", "m", 7), CKPT_E_LIMIT);
    CHECK_EQ_INT(ckpt_walk_name_check(4, SIZE_MAX, 2, "f", "m", 7), CKPT_E_LIMIT);
    CHECK(strstr(ckpt_error_last()->message, "expected at most 3 (max_name_bytes 4") != NULL);
    CHECK_EQ_INT(ckpt_walk_name_check(0, 0, 0, "f", "m", 7), CKPT_E_LIMIT);
    CHECK(strstr(ckpt_error_last()->message, "name of 0 bytes: expected at most 0") != NULL);
    CHECK_EQ_INT(ckpt_walk_name_fits(4, 3, 0), 1);
    CHECK_EQ_INT(ckpt_walk_name_fits(4, 4, 0), 0);
    CHECK_EQ_INT(ckpt_walk_name_fits(4, 0, 4), 0);
    ckpt_arena_free(&a);
}

/* ------------------------------------------------------------ allocation */

TEST(allocation_failures) {
    ckpt_arena a = {0};
    ckpt_value *root = sample(&a);
    /* deep enough that the stack grows */
    ckpt_value *cur = root->u.dict.vals[0];
    for (int i = 0; i < 100; i++) {
        ckpt_value *next = ckpt_value_new(&a, CKPT_KIND_LIST);
        ckpt_value_append(&a, cur, next);
        cur = next;
    }
    int rc = CKPT_E_NOMEM, failed = 0;
    for (int nth = 1; rc == CKPT_E_NOMEM && nth < 1000; nth++) {
        trace t = {.skip_depth = -1};
        fail_alloc_arm(nth);
        rc = run(&t, root, 0);
        fail_alloc_disarm();
        failed += rc == CKPT_E_NOMEM;
    }
    CHECK_EQ_INT(rc, 0);
    CHECK(failed >= 2); /* the name buffer and the stack */
    ckpt_arena_free(&a);
}

/* Equal names: reached by different keys, both are kept (a collision,
 * counted, the first one's paths named); reached by a key one dict
 * repeats, the later leaf wins and the one it shadows is listed. */
TEST(flatten_equal_names) {
    ckpt_arena a = {0};
    ckpt_value *t[11], *root = ckpt_value_new(&a, CKPT_KIND_DICT);
    for (int i = 0; i < 11; i++) t[i] = ckpt_value_new(&a, CKPT_KIND_TENSOR);
    ckpt_value *ab = ckpt_value_new(&a, CKPT_KIND_DICT), *z = ckpt_value_new(&a, CKPT_KIND_LIST);
    ckpt_value *q = ckpt_value_new(&a, CKPT_KIND_DICT), *qr = ckpt_value_new(&a, CKPT_KIND_DICT);
    ckpt_value *qr2 = ckpt_value_new(&a, CKPT_KIND_DICT), *n = ckpt_value_new(&a, CKPT_KIND_DICT);
    ckpt_value_dict_set(&a, root, str(&a, "w"), t[1]);
    ckpt_value_dict_set(&a, ab, str(&a, "b"), t[2]);
    ckpt_value_dict_set(&a, ab, str(&a, "c"), t[3]);
    ckpt_value_dict_set(&a, root, str(&a, "a"), ab);
    ckpt_value_dict_set(&a, root, str(&a, "a.b"), t[4]); /* collides with t2 */
    ckpt_value_dict_set(&a, root, str(&a, "a.c"), t[3]); /* the same tensor, another path */
    ckpt_value_append(&a, z, t[5]);
    ckpt_value_append(&a, z, t[6]);
    ckpt_value_dict_set(&a, root, str(&a, "z"), z);
    ckpt_value_dict_set(&a, root, str(&a, "z.1"), t[7]); /* collides with t6 */
    ckpt_value_dict_set(&a, qr, str(&a, "s"), t[8]);
    ckpt_value_dict_set(&a, q, str(&a, "r"), qr);
    ckpt_value_dict_set(&a, root, str(&a, "q"), q);
    ckpt_value_dict_set(&a, qr2, str(&a, "s"), t[9]);
    ckpt_value_dict_set(&a, root, str(&a, "q.r"), qr2);
    ckpt_value_dict_set(&a, root, str(&a, "q.r.s"), t[10]); /* collides with t8, t9 */
    ckpt_value_dict_set(&a, n, str(&a, "m"), ckpt_value_new_int(&a, 1));
    ckpt_value_dict_set(&a, root, str(&a, "n"), n);
    ckpt_value_dict_set(&a, root, str(&a, "n.m"), ckpt_value_new_int(&a, 2));
    ckpt_value_dict_set(&a, root, str(&a, "w"), t[0]); /* repeated: replaces t1 */
    ckpt_flat fl;
    ckpt_limits lim = CKPT_LIMITS_INIT;
    CHECK_EQ_INT(ckpt_flatten(&fl, &a, root, &lim, 1000, UINT64_MAX, "f", NULL), 0);
    static const char *const names[] = {"a.b",   "a.b", "a.c", "a.c", "q.r.s", "q.r.s",
                                        "q.r.s", "w",   "z.0", "z.1", "z.1"};
    static const int kept[] = {2, 4, 3, 3, 8, 9, 10, 0, 5, 6, 7};
    CHECK_EQ_INT(fl.ntensors, 11);
    for (size_t i = 0; i < 11 && i < fl.ntensors; i++) {
        CHECK_EQ_STR(fl.tensors[i].name, names[i]);
        CHECK(fl.tensors[i].value == t[kept[i]]);
    }
    CHECK_EQ_INT(fl.ncollisions, 6); /* a.b, a.c, q.r.s twice, z.1, n.m */
    CHECK_EQ_STR(fl.collision_name, "a.b");
    CHECK_EQ_STR(fl.collision_paths[0], "['a']['b']");
    CHECK_EQ_STR(fl.collision_paths[1], "['a.b']");
    CHECK_EQ_INT(fl.nshadowed, 1);
    CHECK_EQ_STR(fl.shadowed[0].name, "w");
    CHECK(fl.shadowed[0].value == t[1]);
    CHECK_EQ_INT(fl.nvalues, 2); /* values collide too, both listed */
    CHECK_EQ_STR(fl.values[0].name, "n.m");
    CHECK_EQ_INT(fl.values[0].value->u.i.v, 1);
    CHECK_EQ_INT(fl.values[1].value->u.i.v, 2);
    /* a repeated key whose value is a dict replaces the whole entry */
    ckpt_value *rep = ckpt_value_new(&a, CKPT_KIND_DICT), *d0 = ckpt_value_new(&a, CKPT_KIND_DICT);
    ckpt_value *d1 = ckpt_value_new(&a, CKPT_KIND_DICT), *lst = ckpt_value_new(&a, CKPT_KIND_LIST);
    ckpt_value_dict_set(&a, d0, str(&a, "x"), t[0]);
    ckpt_value_dict_set(&a, d1, str(&a, "x"), t[1]);
    ckpt_value_dict_set(&a, rep, str(&a, "d"), d0);
    ckpt_value_dict_set(&a, rep, str(&a, "d"), d1);
    ckpt_value_append(&a, lst, t[2]);
    ckpt_value_dict_set(&a, rep, ckpt_value_new_int(&a, 7), lst);
    ckpt_value_dict_set(&a, rep, str(&a, "7.0"), t[3]);
    CHECK_EQ_INT(ckpt_flatten(&fl, &a, rep, &lim, 1000, UINT64_MAX, "f", NULL), 0);
    CHECK_EQ_INT(fl.ntensors, 3);
    CHECK_EQ_INT(fl.nshadowed, 1);
    CHECK(fl.shadowed[0].value == t[0]);
    CHECK_EQ_INT(fl.ncollisions, 1);
    CHECK_EQ_STR(fl.collision_paths[0], "[7][0]");
    CHECK_EQ_STR(fl.collision_paths[1], "['7.0']");
    /* the paths count against the same byte budget as the names: here
     * exactly the two entries' (2 * (24 + 16 + 16) bytes), then their
     * three frames too */
    ckpt_value *two = ckpt_value_new(&a, CKPT_KIND_DICT),
               *inner = ckpt_value_new(&a, CKPT_KIND_DICT);
    ckpt_value_dict_set(&a, two, str(&a, "a.b"), t[0]);
    ckpt_value_dict_set(&a, inner, str(&a, "b"), t[1]);
    ckpt_value_dict_set(&a, two, str(&a, "a"), inner);
    CHECK_EQ_INT(ckpt_flatten(&fl, &a, two, &lim, 1000, 112, "f", NULL), CKPT_E_LIMIT);
    CHECK(strstr(ckpt_error_last()->message, "paths of 1 leaves of equal names") != NULL);
    CHECK_EQ_INT(
        ckpt_flatten(&fl, &a, two, &lim, 1000, 112 + 3 * sizeof(ckpt_walk_frame), "f", NULL), 0);
    CHECK_EQ_INT(fl.ntensors, 2);
    /* none shadowed: no array */
    ckpt_value *one = ckpt_value_new(&a, CKPT_KIND_DICT);
    ckpt_value_dict_set(&a, one, str(&a, "x"), t[0]);
    ckpt_value_dict_set(&a, one, str(&a, "y"), t[0]);
    CHECK_EQ_INT(ckpt_flatten(&fl, &a, one, &lim, 1000, UINT64_MAX, "f", NULL), 0);
    CHECK_EQ_INT(fl.ntensors, 2);
    CHECK_EQ_INT(fl.nshadowed, 0);
    CHECK_EQ_INT(fl.ncollisions, 0);
    CHECK(fl.collision_name == NULL);
    CHECK(fl.shadowed == NULL);
    ckpt_arena_free(&a);
}

static ckpt_value *tuple1(ckpt_arena *a, ckpt_value *item) {
    ckpt_value *t = ckpt_value_new(a, CKPT_KIND_TUPLE);
    ckpt_value_append(a, t, item);
    return t;
}

/* Keys whose text is not their identity, as torch.load keeps them:
 * {(1,): t0, (2,): t1, (True,): t2} is {(1,): t2, (2,): t1} (tuples
 * were all the name "tuple", one key: t1 hidden); two NaN keys are two
 * keys, the same NaN object one; {'a.b': t3, 'a': {'b': t4}, 'a.b': t5}
 * keeps t4 and t5, not the replaced t3 (the last was compared only with
 * the one before it) */
TEST(flatten_keys_as_python_compares) {
    ckpt_arena a = {0};
    ckpt_value *t[8], *root = ckpt_value_new(&a, CKPT_KIND_DICT);
    for (int i = 0; i < 8; i++) t[i] = ckpt_value_new(&a, CKPT_KIND_TENSOR);
    ckpt_value_dict_set(&a, root, tuple1(&a, ckpt_value_new_int(&a, 1)), t[0]);
    ckpt_value_dict_set(&a, root, tuple1(&a, ckpt_value_new_int(&a, 2)), t[1]);
    ckpt_value_dict_set(&a, root, tuple1(&a, ckpt_value_new_bool(&a, 1)), t[2]);
    ckpt_value *ab = ckpt_value_new(&a, CKPT_KIND_DICT), *nan = ckpt_value_new_float(&a, NAN);
    ckpt_value_dict_set(&a, root, str(&a, "a.b"), t[3]);
    ckpt_value_dict_set(&a, ab, str(&a, "b"), t[4]);
    ckpt_value_dict_set(&a, root, str(&a, "a"), ab);
    ckpt_value_dict_set(&a, root, str(&a, "a.b"), t[5]);
    ckpt_value_dict_set(&a, root, ckpt_value_new_float(&a, NAN), t[6]);
    ckpt_value_dict_set(&a, root, nan, t[7]);
    ckpt_value_dict_set(&a, root, nan, t[0]);
    ckpt_flat fl;
    ckpt_limits lim = CKPT_LIMITS_INIT;
    CHECK_EQ_INT(ckpt_flatten(&fl, &a, root, &lim, 1000, UINT64_MAX, "f", NULL), 0);
    static const char *const names[] = {"a.b", "a.b", "nan", "nan", "tuple", "tuple"};
    static const int kept[] = {5, 4, 6, 0, 2, 1};
    CHECK_EQ_INT(fl.ntensors, 6);
    for (size_t i = 0; i < 6 && i < fl.ntensors; i++) {
        CHECK_EQ_STR(fl.tensors[i].name, names[i]);
        CHECK(fl.tensors[i].value == t[kept[i]]);
    }
    CHECK_EQ_INT(fl.ncollisions, 3);
    CHECK_EQ_INT(fl.nshadowed, 3); /* t3, t7, t0 */
    /* many leaves of one name that collide are compared against the
     * walk's budget, not without end */
    ckpt_value *many = ckpt_value_new(&a, CKPT_KIND_DICT);
    for (int i = 0; i < 100; i++)
        ckpt_value_dict_set(&a, many, tuple1(&a, ckpt_value_new_int(&a, i)), t[0]);
    CHECK_EQ_INT(ckpt_flatten(&fl, &a, many, &lim, 1000, UINT64_MAX, "f", NULL), CKPT_E_LIMIT);
    CHECK(strstr(ckpt_error_last()->message, "named \"tuple\"") != NULL);
    CHECK_EQ_INT(ckpt_flatten(&fl, &a, many, &lim, 5000, UINT64_MAX, "f", NULL), 0);
    CHECK_EQ_INT(fl.ntensors, 100);
    CHECK_EQ_INT(fl.ncollisions, 99);
    ckpt_arena_free(&a);
}

int main(void) {
    RUN(order_names_roles);
    RUN(object_attrs);
    RUN(bounds);
    RUN(cycles);
    RUN(name_limit_and_prefix);
    RUN(flatten_equal_names);
    RUN(flatten_keys_as_python_compares);
    RUN(allocation_failures);
    return harness_end();
}
