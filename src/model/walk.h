/* walk.h - the one traversal of a value tree, bounded.
 *
 * Every walk over a ckpt_value tree goes through ckpt_walk_run: flatten,
 * the writers, rename, convert's selection, the training analysis. It is
 * iterative (the C stack does not grow with the input) and bounded by
 * three limits, each an error naming the node where it was hit:
 *   - depth: a node deeper than max_depth (the root is depth 0);
 *   - visits: more than max_visits nodes entered. A node shared by several
 *     paths is entered once per path, so a small hostile DAG ("billion
 *     laughs") cannot make the walk exponential;
 *   - name length: a flattened name longer than max_name bytes.
 * A cyclic graph has paths of every length, so a walk that follows its
 * cycle always ends at one of the first two limits; the path is then
 * searched for a container that contains itself and the failure is
 * reported as that cycle (CKPT_E_UNSUPPORTED, "cyclic reference:
 * \"a.0\" contains itself") rather than as the limit. A visitor that does
 * not descend into nodes it has seen (the encoders, which write refs)
 * never meets a cycle.
 *
 * Usage:
 *     ckpt_walk w;
 *     ckpt_walk_init(&w, &f->opts.limits, f->path, NULL);
 *     w.enter = my_enter;        // CKPT_WALK_DESCEND, _SKIP, _STOP or < 0
 *     w.ctx = &state;
 *     int rc = ckpt_walk_run(&w, root);
 *
 * Children, in order: a list, tuple or set's items (role ITEM, named by
 * index); a dict's entries (role VALUE, named by ckpt_value_key_text of
 * the key; with CKPT_WALK_KEYS each key is visited first, role KEY, adding
 * no name); with CKPT_WALK_DICT_STATE, then a dict's BUILD state (role
 * STATE, adding no name); with CKPT_WALK_OBJECT_ATTRS, an object's
 * attributes: the entries of its BUILD state dict (or of the dict of a
 * (dict, slots) state), as if they were its own; with
 * CKPT_WALK_OBJECT_PARTS instead, an object's arguments (a TUPLE) then its
 * BUILD state, each when present (role PART, index 0 or 1, adding no
 * name). */
#ifndef CKPT_WALK_H
#define CKPT_WALK_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"
#include "model/value.h"

/* What `enter` answers (or a negative CKPT_E_* code, which ends the walk
 * and is returned by ckpt_walk_run). */
enum {
    CKPT_WALK_DESCEND = 0, /* visit the node's children, then call `leave` */
    CKPT_WALK_SKIP = 1,    /* neither children nor `leave` */
    CKPT_WALK_STOP = 2,    /* end the walk now; ckpt_walk_run returns 0 */
    CKPT_WALK_PRUNE = 3    /* no children, but `leave` (a leaf to close) */
};

/* How a node hangs from its parent. */
typedef enum ckpt_walk_role {
    CKPT_WALK_ROOT,
    CKPT_WALK_ITEM,  /* list, tuple or set item */
    CKPT_WALK_KEY,   /* dict key (CKPT_WALK_KEYS) */
    CKPT_WALK_VALUE, /* dict value, or an object's attribute */
    CKPT_WALK_STATE, /* a dict's BUILD state (CKPT_WALK_DICT_STATE) */
    CKPT_WALK_PART   /* an object's arguments or state (CKPT_WALK_OBJECT_PARTS) */
} ckpt_walk_role;

/* Edges followed besides items and dict values (ckpt_walk.follow). */
enum {
    CKPT_WALK_KEYS = 1u,
    CKPT_WALK_DICT_STATE = 2u,
    CKPT_WALK_OBJECT_ATTRS = 4u,
    CKPT_WALK_OBJECT_PARTS = 8u
};

/* A node on the path from the root to the current node. */
typedef struct ckpt_walk_frame {
    const ckpt_value *value;
    const ckpt_value *key; /* VALUE: its key; else NULL */
    size_t index;          /* ITEM, KEY, VALUE, PART: position in the parent */
    ckpt_walk_role role;
    size_t name_len; /* the node's name is w->name[0..name_len) */
    size_t seg_len;  /* of which the last seg_len bytes are its own
                              segment (0 for ROOT, KEY, STATE) */
    uintptr_t user;  /* the visitor's: set in enter, read by children */
    size_t next_;    /* private: next child */
} ckpt_walk_frame;

typedef struct ckpt_walk ckpt_walk;
typedef int (*ckpt_walk_fn)(ckpt_walk *w, ckpt_walk_frame *node);

struct ckpt_walk {
    /* set by the caller (ckpt_walk_init fills the bounds) */
    ckpt_walk_fn enter; /* required */
    ckpt_walk_fn leave; /* optional: after the children of a DESCEND node
                           (leaves included), or right after a PRUNE
                           node's enter; 0 or a negative code */
    void *ctx;
    unsigned follow;    /* CKPT_WALK_* edges */
    int names;          /* build w->name (the flattened name) */
    const char *prefix; /* the root's name ("" when NULL) */
    uint32_t max_depth;
    uint64_t max_visits;
    uint64_t max_name;         /* bytes of a name, its NUL included */
    const char *file, *member; /* for errors */
    /* read by the visitor */
    uint32_t depth;   /* of the node entered or left */
    uint64_t visits;  /* nodes entered so far */
    const char *name; /* NUL-terminated name of the node (names only) */
    /* private */
    ckpt_walk_frame *stack_;
    size_t cap_;
    ckpt_walk_frame *first_; /* the run's own first frames, not freed */
    char *buf_;
    size_t bufcap_;
};

/* The default visit budget for limits `lim`: four nodes per tensor the
 * limits allow, plus 1024 (a state dict is a dict of tensors; optimizer
 * state adds a few containers per parameter). */
uint64_t ckpt_walk_budget(const ckpt_limits *lim);

/* The name-length rule, the one for every flattened name (a walk's, a
 * safetensors header's, a JSON manifest's): a name of head + tail bytes
 * fits `max` bytes (limits.max_name_bytes) with its NUL. 1 when it fits;
 * head + tail is not computed when it could overflow. */
int ckpt_walk_name_fits(uint64_t max, size_t head, size_t tail);

/* ckpt_walk_name_fits, as 0, or CKPT_E_LIMIT recorded against file,
 * member and offset (the message gives the length, saturated). */
int ckpt_walk_name_check(uint64_t max, size_t head, size_t tail, const char *file,
                         const char *member, uint64_t offset);

/* Zeroes w and sets max_depth and max_name from lim (CKPT_LIMITS_INIT's
 * when NULL), max_visits to ckpt_walk_budget(lim), and the file and member
 * that errors name. Callers may lower or raise any bound afterwards. */
void ckpt_walk_init(ckpt_walk *w, const ckpt_limits *lim, const char *file, const char *member);

/* Walks root depth-first, calling enter for each node (parents before
 * children, children in order) and leave after a descended node's
 * children. Returns 0 (also after CKPT_WALK_STOP), the visitor's negative
 * code, CKPT_E_LIMIT for a bound (see above), CKPT_E_UNSUPPORTED for a
 * cycle, or CKPT_E_NOMEM. Its buffers are freed before it returns; w's
 * settings stay, so w can be run again. */
int ckpt_walk_run(ckpt_walk *w, const ckpt_value *root);

/* The node `up` levels above the current one (0: the current node), or
 * NULL above the root. Borrowed, valid during the callback. */
ckpt_walk_frame *ckpt_walk_up(const ckpt_walk *w, uint32_t up);

/* The segment the node adds to its parent's name (empty for the root). */
static inline const char *ckpt_walk_segment(const ckpt_walk *w, const ckpt_walk_frame *n) {
    return w->name + n->name_len - n->seg_len;
}

#endif
