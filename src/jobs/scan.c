/* scan.c - ckpt_scan: would loading this file run code? (ckpt.h "scan";
 * FORMATS.md §5.4 for the design anchors, §5.5 for the bypasses it must
 * see through.)
 *
 * Every pickle stream in the file runs through the restricted machine
 * (pickle.h) in scan mode (pk_options.scan_only: the events without the
 * data; persistent ids get a placeholder storage), and the machine's
 * events name every global it resolves, calls or BUILDs; a BUILD on a
 * global itself (a module, class or function) is always dangerous. A real stack machine resolves
 * STACK_GLOBAL operands from the memo and every string opcode, whatever
 * protocol the stream declares; operands it cannot know are symbolic and
 * dangerous. Where the pickles are:
 *   - a zip archive anywhere in the file (found by its end record, so a
 *     polyglot prefix is seen): every member that looks like a pickle by
 *     its first/last bytes, plus every *.pkl, whatever the flags, CRC or
 *     local name say (torch ignores them, §5.5);
 *   - otherwise the file itself, as stacked pickles: a legacy torch file's
 *     five pickles (not the storage blobs after them), or a plain pickle
 *     and any further stream after its STOP;
 *   - str/bytes literals that an unpickling call receives (pickle.loads,
 *     torch.load..., directly or through the decoders and io.BytesIO that
 *     make its argument) and that hold a pickle (raw, latin-1 text of
 *     bytes as protocol 2 writes bytes, hex, base64), up to max_nesting
 *     deep; any other string is data, never scanned;
 *   - a sharded index (JSON text with a "weight_map"): every shard file it
 *     lists, next to it, scanned as a file of its own.
 * The verdict only needs the allowlist (builders.h + the caller's list);
 * scan_policy.c decides how loudly an off-list global is reported.
 *
 * Integrity is verify's job: a checkpoint whose pickles all parse and are
 * clean is safe even when its storages are missing, truncated or fail
 * their CRC (loading may then fail, but runs no code); tensor bytes are
 * never read, only sniffed, so a scan costs O(pickles), not O(file). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "model/dtype.h"
#include "model/file.h"
#include "format/pickle.h"
#include "format/pickle_builders.h"
#include "format/pickle_log.h"
#include "jobs/scan.h"
#include "jobs/scan_policy.h"
#include "container/tar.h"
#include "container/zip.h"
#include "format/dcp_meta.h"
#include "format/index_json.h"
#include "format/npy.h"
#include "format/safetensors.h"
#include "open/dcp.h"
#include "open/sharded.h"

/* torch.serialization.MAGIC_NUMBER 0x1950a86a20f9469cfc6c in decimal */
#define LEGACY_MAGIC "119547037146038801333356"
/* magic, protocol version, sys_info, main object, storage keys */
#define LEGACY_STREAMS 5
/* max_nesting is capped here: every level is a C stack frame chain. */
#define NESTING_CAP 32
/* Distinct findings kept; repeats of one are counted, not stored. */
#define MAX_FINDINGS 10000
/* Global names are interned and shown with their module and name cut to
 * this many bytes together (then CUT_MARK). */
#define NAME_CAP 256
/* Messages are cut to this many bytes. */
#define MSG_CAP 512

/* Deflated members not named like a pickle or an array are inflated to be
 * sniffed only up to this size. */
#define SNIFF_INFLATE_MAX ((uint64_t)1 << 20)
#define ZIP_FLAG_ENCRYPTED 0x0001u
#define ZIP_FLAG_PATCHED 0x0020u
#define ZIP_FLAG_STRONG 0x0040u

/* ------------------------------------------------------------ report */

struct ckpt_scan_report {
    ckpt_arena arena; /* owns every string below */
    ckpt_verdict verdict;
    ckpt_finding *findings;
    uint64_t *repeats; /* times findings[i] recurred after the first */
    size_t nfindings, findcap, repcap;
    const char **globals; /* interned, sorted at the end */
    size_t nglobals, globcap;
    const char **shards; /* ckpt_scan_shard */
    size_t nshards, shardcap;
    ckpt_weights_only wo; /* ckpt_scan_weights_only */
};

/* An interned global and what the policy says about it. */
typedef struct gent {
    const char *full;  /* "module.name", cut to NAME_CAP bytes */
    ckpt_severity sev; /* when not allowlisted */
    const char *why;
    int policy; /* 1: on the caller's allowlist and allowable */
    int review; /* a data-only class (ckpt_scan_data_class) */
} gent;

/* Open addressing over indices + 1 (0 = empty), power-of-two capacity. */
typedef struct index_set {
    size_t *slot;
    size_t cap, n;
} index_set;

typedef struct scanner {
    ckpt_scan_report *r;
    const char *file;
    const ckpt_source *src; /* the file being read (base/source.h: bytes
                               of its mapping are read with pread, never
                               through it), or NULL for memory */
    ckpt_scan_options o;
    const char **allow; /* sorted copy of o.allow */
    ckpt_arena scratch; /* zip directory, policy tables */
    gent *g;            /* interned globals, same order as r->globals */
    size_t gcap;
    index_set gset, fset;
    uint64_t seed;          /* hash seed from addresses (ASLR): crafted
                                 names cannot force long probe chains */
    uint64_t budget;        /* inflate budget left (zip bombs) */
    int nomem;              /* an allocation failed: the scan fails */
    int header_checked;     /* the top file's safetensors header already
                                 passed ckpt_safetensors_read (opened) */
    int tar_types;          /* scanning a legacy tar's storages or tensors
                                 member, whose tuples name torch.*Storage
                                 and torch.*Tensor classes */
    int content;            /* pickle, zip or safetensors content found */
    int unscannable;        /* some content could not be examined */
    int unsafe;             /* a dangerous or suspicious finding */
    int review;             /* a data-only class, not allowed by the caller */
    uint64_t dropped;       /* findings past MAX_FINDINGS */
    const char *dir;        /* the file's directory, where the shards of
                                 a sharded index are; NULL for a buffer */
    const char *shard;      /* the shard file being scanned (report
                                 arena), or NULL for the file itself */
    int legacy_head;        /* the file scanned starts with torch's legacy
                                 magic (format/detect.h) */
    int dcp;                /* the file is a DCP directory's .metadata, or
                                 DCP_NO_METADATA (the directory lacks it) */
    int wo_live;            /* the next stream is one torch.load unpickles */
    const char *ts_member;  /* the constants.pkl of the TorchScript archive
                               being scanned (torch.load refuses it under
                               weights_only before unpickling), or NULL */
    uint64_t ts_offset;     /* its local header's offset */
    const ckpt_zip *opened; /* the directory open read of the file
                                 (torch's reading, which succeeded), or
                                 NULL: scan_zip_readings reads it again */
    const pk_log *log;      /* the opened file's data.pkl events, or NULL */
    int zip_depth;          /* zip archives inside the one scanned */
} scanner;

/* The member of findings about the file as a whole: "" for the file
 * itself, the shard's name inside a sharded set. */
static const char *file_member(const scanner *sc) { return sc->shard ? sc->shard : ""; }

/* A run of bytes scanned as stacked pickle streams. */
typedef struct region {
    const uint8_t *p;
    size_t n;
    uint64_t base; /* absolute offset of p[0] */
    int decoded;   /* bytes not in the file (inflated, decoded
                                 from a literal): every finding is at `at` */
    uint64_t at;
    const char *member; /* report-arena string, "" for the file */
    int sniffed;        /* taken for a pickle by content, not name */
    uint32_t depth;     /* 0, or nesting level of a literal */
    int top;            /* the file itself: may be legacy, may be
                                 no pickle at all */
    int dcp_meta;       /* a DCP .metadata: its classes are data */
    /* the events of its first stream, which the reader of the opened file
     * ran (logged_run), or NULL: it runs here */
    const pk_log *log;
} region;

/* A literal an unpickling call receives, kept until its stream is done. */
typedef struct literal {
    const uint8_t *p;
    size_t n;
    uint64_t offset; /* absolute offset of the call */
    ckpt_lit_enc enc;
} literal;

/* Bounds of the walk through a call's arguments to its literals. */
#define ARG_DEPTH 8
#define ARG_ITEMS 4096

/* One stream's run: what the event callback needs. */
typedef struct stream {
    scanner *sc;
    const region *rg;
    ckpt_arena *work;
    uint64_t events;  /* globals, calls and BUILDs on objects */
    size_t arg_items; /* argument values walked (ARG_ITEMS) */
    literal *lits;
    size_t nlits, litcap;
    /* the last callees asked about (callee_unpickles): a state_dict
     * calls two memoized globals, _rebuild_tensor_v2 and OrderedDict, once
     * per tensor */
    struct {
        char module[64], name[64];
        int unpickles;
    } callee[4];
    unsigned next_callee;
    /* a stream torch.load unpickles: the first thing its weights_only
     * unpickler refuses, an opcode (from the machine) or a global */
    int wo;
    pk_weights_only wo_op;
    uint64_t wo_at; /* the global's offset, CKPT_NO_OFFSET: none */
    const char *wo_global;
    int wo_runs_code; /* wo_global is of a dangerous family */
} stream;

static int scan_region(scanner *sc, const region *rg);

/* FNV-1a from a seeded basis. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const uint8_t *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211u;
    return h;
}

/* Finds the slot for hash h whose index satisfies eq, or the empty slot
 * where it belongs. */
static size_t *set_probe(index_set *s, uint64_t h, int (*eq)(const scanner *, size_t, const void *),
                         const scanner *sc, const void *key) {
    for (size_t i = (size_t)h & (s->cap - 1);; i = (i + 1) & (s->cap - 1))
        if (!s->slot[i] || eq(sc, s->slot[i] - 1, key)) return &s->slot[i];
}

/* Makes room for one more entry (load <= 1/2). rehash gives an index's
 * hash. 0 or -1. */
static int set_reserve(scanner *sc, index_set *s, uint64_t (*rehash)(const scanner *, size_t)) {
    if ((s->n + 1) * 2 <= s->cap) return 0;
    size_t ncap = s->cap ? s->cap * 2 : 64;
    size_t *old = s->slot, ocap = s->cap;
    s->slot = ckpt_arena_array(&sc->scratch, ncap, sizeof *s->slot);
    if (!s->slot) {
        s->slot = old;
        return -1;
    }
    s->cap = ncap;
    for (size_t i = 0; i < ocap; i++) {
        if (!old[i]) continue;
        size_t j = (size_t)rehash(sc, old[i] - 1) & (ncap - 1);
        while (s->slot[j]) j = (j + 1) & (ncap - 1);
        s->slot[j] = old[i];
    }
    return 0;
}

/* ------------------------------------------------------------ globals */

/* A cut name is shown with CUT_MARK after its NAME_CAP bytes, so that it
 * never shares an entry (and an --allow) with a name of exactly NAME_CAP
 * bytes that it starts with. */
#define CUT_MARK "..."

typedef struct gkey {
    const char *module, *name;
    size_t mlen, nlen; /* bytes that take part (cut at NAME_CAP) */
    int cut;           /* the name was longer */
} gkey;

static uint64_t gkey_hash(const scanner *sc, const gkey *k) {
    uint64_t h = hash_bytes(sc->seed, k->module, k->mlen);
    h = hash_bytes(h, ".", 1);
    h = hash_bytes(h, k->name, k->nlen);
    return k->cut ? hash_bytes(h, CUT_MARK, strlen(CUT_MARK)) : h;
}

static uint64_t g_rehash(const scanner *sc, size_t i) {
    const char *f = sc->g[i].full;
    return hash_bytes(sc->seed, f, strlen(f));
}

static int g_eq(const scanner *sc, size_t i, const void *key) {
    const gkey *k = key;
    const char *f = sc->g[i].full;
    return strncmp(f, k->module, k->mlen) == 0 && f[k->mlen] == '.' &&
           strncmp(f + k->mlen + 1, k->name, k->nlen) == 0 &&
           strcmp(f + k->mlen + 1 + k->nlen, k->cut ? CUT_MARK : "") == 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int policy_allows(const scanner *sc, const char *full) {
    return sc->o.nallow &&
           bsearch(&full, sc->allow, sc->o.nallow, sizeof *sc->allow, cmp_str) != NULL;
}

/* The interned entry of module.name, classified on first sight; NULL
 * when out of memory. Names are cut at NAME_CAP bytes so that repeated
 * events cost O(1) however long the name; a name that long is never a
 * real data builder and is reported as dangerous. */
static const gent *intern_global(scanner *sc, const char *module, const char *name) {
    gkey k = {module, name, strlen(module), strlen(name), 0};
    if (k.mlen > NAME_CAP) k.mlen = NAME_CAP, k.cut = 1;
    if (k.mlen + k.nlen > NAME_CAP) k.nlen = NAME_CAP - k.mlen, k.cut = 1;
    int cut = k.cut;
    if (set_reserve(sc, &sc->gset, g_rehash)) return NULL;
    uint64_t h = gkey_hash(sc, &k);
    size_t *slot = set_probe(&sc->gset, h, g_eq, sc, &k);
    if (*slot) return &sc->g[*slot - 1];

    ckpt_scan_report *r = sc->r;
    char *full = ckpt_arena_printf(&r->arena, "%.*s.%.*s%s", (int)k.mlen, module, (int)k.nlen, name,
                                   cut ? CUT_MARK : "");
    if (!full ||
        ckpt_arena_grow(&r->arena, (void **)&r->globals, &r->globcap, r->nglobals + 1,
                        sizeof *r->globals) ||
        ckpt_arena_grow(&sc->scratch, (void **)&sc->g, &sc->gcap, r->nglobals + 1, sizeof *sc->g))
        return NULL;
    gent *e = &sc->g[r->nglobals];
    e->full = full;
    e->sev = ckpt_scan_classify(module, name, &e->why);
    if (cut) {
        e->sev = CKPT_SEVERITY_DANGEROUS;
        e->why = "a name too long for any data builder";
    }
    /* A caller may vouch for an unknown class, not for a code-execution
     * family (torch likewise refuses to allowlist os/sys/posix/nt). */
    e->policy = !cut && e->sev != CKPT_SEVERITY_DANGEROUS && policy_allows(sc, full);
    e->review = !cut && ckpt_scan_data_class(ckpt_scan_map_module(module), name);
    r->globals[r->nglobals] = full;
    *slot = ++r->nglobals;
    sc->gset.n++;
    return e;
}

/* ------------------------------------------------------------ findings */

typedef struct fkey {
    ckpt_severity sev;
    const char *kind, *global, *member; /* static, interned, report-owned */
} fkey;

static uint64_t fkey_hash(const scanner *sc, const fkey *k) {
    uintptr_t v[4] = {(uintptr_t)k->sev, (uintptr_t)k->kind, (uintptr_t)k->global,
                      (uintptr_t)k->member};
    return hash_bytes(sc->seed, v, sizeof v);
}

static uint64_t f_rehash(const scanner *sc, size_t i) {
    const ckpt_finding *f = &sc->r->findings[i];
    fkey k = {f->severity, f->kind, f->global, f->member};
    return fkey_hash(sc, &k);
}

static int f_eq(const scanner *sc, size_t i, const void *key) {
    const fkey *k = key;
    const ckpt_finding *f = &sc->r->findings[i];
    return f->severity == k->sev && f->kind == k->kind && f->global == k->global &&
           f->member == k->member;
}

/* Records a finding; a repeat of the same severity, kind, global and
 * member only counts. kind must be a static string, global an interned
 * one (or NULL), member a report-arena string. */
static void add_finding(scanner *sc, ckpt_severity sev, const char *kind, const char *global,
                        const char *member, uint64_t offset, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 7, 8)))
#endif
    ;
static void add_finding(scanner *sc, ckpt_severity sev, const char *kind, const char *global,
                        const char *member, uint64_t offset, const char *fmt, ...) {
    ckpt_scan_report *r = sc->r;
    if (sev != CKPT_SEVERITY_INFO) sc->unsafe = 1;
    fkey k = {sev, kind, global, member};
    if (set_reserve(sc, &sc->fset, f_rehash)) {
        sc->nomem = 1;
        return;
    }
    size_t *slot = set_probe(&sc->fset, fkey_hash(sc, &k), f_eq, sc, &k);
    if (*slot) {
        r->repeats[*slot - 1]++;
        return;
    }
    if (r->nfindings >= MAX_FINDINGS) {
        sc->dropped++;
        return;
    }
    char msg[MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char *m = ckpt_arena_strdup(&r->arena, msg);
    if (!m ||
        ckpt_arena_grow(&r->arena, (void **)&r->findings, &r->findcap, r->nfindings + 1,
                        sizeof *r->findings) ||
        ckpt_arena_grow(&r->arena, (void **)&r->repeats, &r->repcap, r->nfindings + 1,
                        sizeof *r->repeats)) {
        sc->nomem = 1;
        return;
    }
    r->findings[r->nfindings] = (ckpt_finding){sev, kind, global, member, offset, m};
    r->repeats[r->nfindings] = 0;
    *slot = ++r->nfindings;
    sc->fset.n++;
}

/* What a stream run over a window cut short did to the report, undone
 * before it runs again over a larger one (scan_window): the findings it
 * added and counted, the flags it set. Globals it interned stay: the
 * longer run resolves them too. */
typedef struct scan_mark {
    size_t nfindings;
    uint64_t *repeats; /* r->repeats[0..nfindings) */
    uint64_t dropped;
    int nomem, content, unscannable, unsafe, review;
} scan_mark;

static int mark_take(scanner *sc, scan_mark *m) {
    ckpt_scan_report *r = sc->r;
    *m = (scan_mark){r->nfindings,    NULL,       sc->dropped, sc->nomem, sc->content,
                     sc->unscannable, sc->unsafe, sc->review};
    if (!r->nfindings) return 0;
    m->repeats = ckpt_malloc(r->nfindings * sizeof *m->repeats);
    if (!m->repeats) return CKPT_E_NOMEM;
    memcpy(m->repeats, r->repeats, r->nfindings * sizeof *m->repeats);
    return 0;
}

static void mark_drop(scan_mark *m) {
    ckpt_free(m->repeats);
    m->repeats = NULL;
}

static void mark_undo(scanner *sc, scan_mark *m) {
    ckpt_scan_report *r = sc->r;
    r->nfindings = m->nfindings;
    if (m->nfindings) memcpy(r->repeats, m->repeats, m->nfindings * sizeof *r->repeats);
    sc->dropped = m->dropped;
    sc->nomem = m->nomem;
    sc->content = m->content;
    sc->unscannable = m->unscannable;
    sc->unsafe = m->unsafe;
    sc->review = m->review;
    /* the set of findings, without the ones dropped */
    index_set *f = &sc->fset;
    if (f->cap) memset(f->slot, 0, f->cap * sizeof *f->slot);
    for (size_t i = 0; i < r->nfindings; i++) {
        size_t j = (size_t)f_rehash(sc, i) & (f->cap - 1);
        while (f->slot[j]) j = (j + 1) & (f->cap - 1);
        f->slot[j] = i + 1;
    }
    f->n = r->nfindings;
    mark_drop(m);
}

/* ------------------------------------------------------------ events */

static uint64_t where(const region *rg, uint64_t offset) { return rg->decoded ? rg->at : offset; }

static const char *nested_note(const region *rg) {
    return rg->depth ? " (in a pickle that an unpickling call receives as a literal)" : "";
}

/* torch.FloatStorage, torch.cuda.LongTensor...: the type classes a
 * legacy tar's storages and tensors members name (legacy_load unpacks
 * them as data; a call of one is still a call event). */
static int legacy_type_class(const char *module, const char *name) {
    size_t n = strlen(name);
    return (strcmp(module, "torch") == 0 || strcmp(module, "torch.cuda") == 0) &&
           !strchr(name, '.') &&
           ((n > 7 && strcmp(name + n - 7, "Storage") == 0) ||
            (n > 6 && strcmp(name + n - 6, "Tensor") == 0));
}

/* torch's weights_only unpickler maps Python 2 module names whatever the
 * protocol (ckpt_scan_map_module), then looks "module.name" up whole: a
 * dotted qualname is allowed when the split at its last '.' is. */
static int weights_only_allows(stream *s, const char *module, const char *name) {
    module = ckpt_scan_map_module(module);
    const char *dot = strrchr(name, '.');
    if (!dot) return ckpt_builders_weights_only(module, name);
    char *m = ckpt_arena_printf(s->work, "%s.%.*s", module, (int)(dot - name), name);
    if (!m) {
        s->sc->nomem = 1;
        return 1;
    }
    return ckpt_builders_weights_only(m, dot + 1);
}

static void on_global(stream *s, const pk_event *ev) {
    scanner *sc = s->sc;
    const region *rg = s->rg;
    const gent *g = intern_global(sc, ev->module, ev->name);
    if (!g) {
        sc->nomem = 1;
        return;
    }
    if (s->wo && !ev->symbolic && s->wo_at == CKPT_NO_OFFSET &&
        !weights_only_allows(s, ev->module, ev->name)) {
        s->wo_at = ev->offset;
        s->wo_global = g->full;
        s->wo_runs_code = g->sev == CKPT_SEVERITY_DANGEROUS;
    }
    if (sc->tar_types && !ev->symbolic && legacy_type_class(ev->module, ev->name)) return;
    uint64_t off = where(rg, ev->offset);
    if (ev->symbolic) {
        add_finding(sc, CKPT_SEVERITY_DANGEROUS, "global", g->full, rg->member, off,
                    "imports a name that is not a constant string (%s): it "
                    "cannot be known without running the pickle%s",
                    ev->opcode == 0x93 ? "STACK_GLOBAL on computed operands"
                                       : "extension registry code",
                    nested_note(rg));
        return;
    }
    /* the allowlist holds top-level names: a dotted qualname walks from an
     * allowlisted object to one of its attributes */
    if (ev->allowed && !strchr(ev->name, '.')) return;
    if (g->policy) {
        add_finding(sc, CKPT_SEVERITY_INFO, "allowed", g->full, rg->member, off,
                    "allowed by policy: %s%s", g->full, nested_note(rg));
        return;
    }
    if (g->review) {
        sc->review = 1;
        add_finding(sc, CKPT_SEVERITY_INFO, "review", g->full, rg->member, off, "imports %s: %s%s",
                    g->full, g->why, nested_note(rg));
        return;
    }
    add_finding(sc, g->sev, "global", g->full, rg->member, off, "imports %s: %s%s", g->full, g->why,
                nested_note(rg));
}

static void on_call_or_build(stream *s, const pk_event *ev, int build) {
    scanner *sc = s->sc;
    const region *rg = s->rg;
    uint64_t off = where(rg, ev->offset);
    if (build && ev->on_reference) {
        /* not an instance: setting attributes of a module, class or
         * function changes what every later load of it (or of a name
         * reached through it) resolves to, allowlisted or not */
        const gent *g = intern_global(sc, ev->module, ev->name);
        if (!g) {
            sc->nomem = 1;
            return;
        }
        add_finding(sc, CKPT_SEVERITY_DANGEROUS, "allowlist-poisoning", g->full, rg->member, off,
                    "BUILD sets attributes of %s itself (the global, not an "
                    "instance): what later loads of it resolve to is no longer "
                    "known%s",
                    g->full, nested_note(rg));
        return;
    }
    if (build && ev->allowed) return; /* plain data, allowlisted object */
    if (!build && ev->allowed && !strchr(ev->name, '.')) return;
    /* the machine names a call of a non-reference, or an object made by
     * one, "?" */
    if (ev->symbolic && strcmp(ev->name, "?") == 0) {
        if (build)
            add_finding(sc, CKPT_SEVERITY_DANGEROUS, "build", NULL, rg->member, off,
                        "BUILD sets the state of an object made by calling a "
                        "value that is not a named global%s",
                        nested_note(rg));
        else
            add_finding(sc, CKPT_SEVERITY_DANGEROUS, "call", NULL, rg->member, off,
                        "calls a value that is not a named global (the result "
                        "of another call, or a computed name)%s",
                        nested_note(rg));
        return;
    }
    const gent *g = intern_global(sc, ev->module, ev->name);
    if (!g) {
        sc->nomem = 1;
        return;
    }
    if ((g->policy || g->review) && !ev->symbolic) return; /* reported with its global */
    ckpt_severity sev = ev->symbolic ? CKPT_SEVERITY_DANGEROUS : g->sev;
    const char *why = ev->symbolic ? "a name that cannot be known without running the "
                                     "pickle"
                                   : g->why;
    if (build)
        add_finding(sc, sev, "build", g->full, rg->member, off,
                    "BUILD sets the state of %s %s object: %s%s",
                    strchr("aeiouAEIOU", g->full[0]) ? "an" : "a", g->full, why, nested_note(rg));
    else
        add_finding(sc, sev, "call", g->full, rg->member, off, "calls %s: %s%s", g->full, why,
                    nested_note(rg));
}

/* Keeps a str/bytes that may hold a pickle for scan_literal. */
static void keep_literal(stream *s, const ckpt_value *v, uint64_t offset) {
    const uint8_t *p = (const uint8_t *)v->u.s.p;
    ckpt_lit_enc enc = ckpt_scan_literal_encoding(p, v->u.s.len);
    if (!enc) return;
    if (ckpt_arena_grow(s->work, (void **)&s->lits, &s->litcap, s->nlits + 1, sizeof *s->lits)) {
        s->sc->nomem = 1;
        return;
    }
    /* v->u.s.p lives in the stream's arena or in the region's bytes: it
     * outlives the run */
    s->lits[s->nlits++] = (literal){p, v->u.s.len, offset, enc};
}

/* The literals an unpickling call receives: its arguments, and the
 * arguments of the calls that made them (a decoder, io.BytesIO), walked
 * to ARG_DEPTH levels and ARG_ITEMS values per stream. */
static void keep_arg_literals(stream *s, const ckpt_value *v, uint64_t offset, unsigned depth) {
    if (!v || depth > ARG_DEPTH || s->arg_items++ >= ARG_ITEMS) return;
    switch (v->kind) {
    case CKPT_KIND_STR:
    case CKPT_KIND_BYTES: keep_literal(s, v, offset); break;
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_LIST:
        for (size_t i = 0; i < v->u.seq.n; i++)
            keep_arg_literals(s, v->u.seq.items[i], offset, depth + 1);
        break;
    case CKPT_KIND_OBJECT: keep_arg_literals(s, v->u.obj.args, offset, depth + 1); break;
    default: break;
    }
}

/* ckpt_scan_unpickles, remembered for the last few callees. */
static int callee_unpickles(stream *s, const char *module, const char *name) {
    size_t ml = strlen(module), nl = strlen(name);
    if (ml >= sizeof s->callee[0].module || nl >= sizeof s->callee[0].name)
        return ckpt_scan_unpickles(module, name);
    for (size_t i = 0; i < sizeof s->callee / sizeof s->callee[0]; i++)
        if (s->callee[i].module[0] && !strcmp(module, s->callee[i].module) &&
            !strcmp(name, s->callee[i].name))
            return s->callee[i].unpickles;
    unsigned k = s->next_callee++ % (sizeof s->callee / sizeof s->callee[0]);
    memcpy(s->callee[k].module, module, ml + 1);
    memcpy(s->callee[k].name, name, nl + 1);
    s->callee[k].unpickles = ckpt_scan_unpickles(module, name);
    return s->callee[k].unpickles;
}

static void on_event(void *ctx, const pk_event *ev) {
    stream *s = ctx;
    if (s->sc->nomem) return;
    /* DCP's metadata classes in its .metadata (format/dcp_meta.h); the
     * same names anywhere else are reported like any other class */
    if (s->rg->dcp_meta && ev->kind != PK_EV_PERSID && !ev->symbolic && !ev->on_reference &&
        ckpt_dcp_meta_allowed(ev->module, ev->name))
        return;
    switch (ev->kind) {
    case PK_EV_GLOBAL:
        s->events++;
        on_global(s, ev);
        break;
    case PK_EV_CALL:
        s->events++;
        on_call_or_build(s, ev, 0);
        if (!ev->symbolic && callee_unpickles(s, ev->module, ev->name))
            keep_arg_literals(s, ev->args, ev->offset, 0);
        break;
    case PK_EV_BUILD:
        if (ev->module[0] || ev->name[0]) s->events++;
        on_call_or_build(s, ev, 1);
        break;
    case PK_EV_PERSID: /* answered by the placeholder below */ break;
    }
}

/* Scan mode's persistent_load: a storage placeholder, which no builder
 * looks into (scan mode runs none). What a pid holds is not a safety
 * question: torch's persistent_load is fixed code, and the globals inside
 * the pid were reported as they resolved. */
static int placeholder_storage(void *ctx, ckpt_value *pid, uint64_t offset, ckpt_value **out) {
    stream *s = ctx;
    (void)pid;
    ckpt_storage *st = ckpt_arena_alloc(s->work, sizeof *st);
    ckpt_value *v = ckpt_value_new(s->work, CKPT_KIND_STORAGE_);
    if (!st || !v)
        return ckpt_err(CKPT_E_NOMEM, s->sc->file, s->rg->member, offset, "out of memory");
    *st =
        (ckpt_storage){.dtype = CKPT_DT_U8, .key = "", .member = "", .file_offset = CKPT_NO_OFFSET};
    v->u.storage = st;
    *out = v;
    return 0;
}

/* ------------------------------------------------------------ literals */

/* Scans the pickle a literal holds, one level deeper. */
static int scan_literal(scanner *sc, const region *rg, ckpt_arena *work, const literal *lit) {
    region sub = {0};
    sub.member = rg->member;
    sub.sniffed = 1;
    sub.depth = rg->depth + 1;
    sub.decoded = 1;
    sub.at = where(rg, lit->offset);
    if (lit->enc == CKPT_LIT_RAW) {
        sub.p = lit->p;
        sub.n = lit->n;
        /* A binary literal points into the region (scan mode): exact file
         * offsets */
        if (!rg->decoded && lit->p >= rg->p && lit->p <= rg->p + rg->n &&
            lit->n <= (size_t)(rg->p + rg->n - lit->p)) {
            sub.decoded = 0;
            sub.base = rg->base + (uint64_t)(lit->p - rg->p);
        }
    } else {
        uint8_t *d = ckpt_arena_alloc(work, lit->n);
        if (!d) return CKPT_E_NOMEM;
        if (ckpt_scan_literal_decode(lit->enc, lit->p, lit->n, d, &sub.n) ||
            !ckpt_scan_pickle_shape(d, sub.n))
            return 0;
        sub.p = d;
    }
    uint32_t max = sc->o.max_nesting < NESTING_CAP ? sc->o.max_nesting : NESTING_CAP;
    if (sub.depth > max) {
        /* The call that unpickles it is an off-list global already
         * reported; so this is not a reason to call the file unscannable. */
        add_finding(sc, CKPT_SEVERITY_INFO, "nested-pickle", NULL, rg->member, sub.at,
                    "an unpickling call receives a pickle nested deeper than "
                    "max_nesting (%u): not scanned",
                    max);
        return 0;
    }
    return scan_region(sc, &sub);
}

/* ------------------------------------------------------------ streams */

/* Records in the report what torch's weights_only unpickler refuses
 * first in stream s, if anything: the opcode or global at the lowest
 * offset. Global strings are the report's (interned). */
static void weights_only_refusal(scanner *sc, const region *rg, stream *s) {
    ckpt_weights_only *w = &sc->r->wo;
    int op = s->wo_op.offset != CKPT_NO_OFFSET &&
             (s->wo_at == CKPT_NO_OFFSET || s->wo_op.offset < s->wo_at);
    if (!op && s->wo_at == CKPT_NO_OFFSET) return;
    w->refused = 1;
    w->member = rg->member;
    w->offset = where(rg, op ? s->wo_op.offset : s->wo_at);
    w->global = op ? NULL : s->wo_global;
    w->opcode = op ? ckpt_pickle_op_name(s->wo_op.op) : NULL;
    char at[64];
    snprintf(at, sizeof at, "%" PRIu64, w->offset);
    w->message =
        op && s->wo_op.why
            ? ckpt_arena_printf(&sc->r->arena,
                                "torch.load(weights_only=True) of torch >= 2.6 refuses this: "
                                "opcode %s at byte %s%s%s (%s; load with weights_only=False "
                                "if you trust the file)",
                                w->opcode, at, w->member[0] ? " of " : "", w->member, s->wo_op.why)
        : op ? ckpt_arena_printf(&sc->r->arena,
                                 "torch.load(weights_only=True) of torch >= 2.6 refuses this: "
                                 "opcode %s at byte %s%s%s (it reads only the pickle protocol 2 "
                                 "opcodes torch.save writes; load with weights_only=False if "
                                 "you trust the file)",
                                 w->opcode, at, w->member[0] ? " of " : "", w->member)
        : s->wo_runs_code
            /* never advise allowlisting what runs code (os.system) */
            ? ckpt_arena_printf(&sc->r->arena,
                                "torch.load(weights_only=True) of torch >= 2.6 refuses this: "
                                "global %s at byte %s%s%s (it runs code: do not allowlist it "
                                "or load with weights_only=False)",
                                w->global, at, w->member[0] ? " of " : "", w->member)
            : ckpt_arena_printf(&sc->r->arena,
                                "torch.load(weights_only=True) of torch >= 2.6 refuses this: "
                                "global %s at byte %s%s%s (allow it with "
                                "torch.serialization.add_safe_globals([%s]) or load with "
                                "weights_only=False if you trust the file)",
                                w->global, at, w->member[0] ? " of " : "", w->member, w->global);
    if (!w->message) sc->nomem = 1;
}

/* Records in the report torch's weights_only refusal of a TorchScript
 * archive: torch.load raises "Cannot use weights_only=True with
 * TorchScript archives" before it unpickles anything, so no global of its
 * data.pkl is the reason, nor allowlisting one the remedy. */
static void torchscript_refusal(scanner *sc) {
    ckpt_weights_only *w = &sc->r->wo;
    w->refused = 1;
    w->member = sc->ts_member;
    w->offset = sc->ts_offset;
    w->global = w->opcode = NULL;
    w->message = ckpt_arena_printf(&sc->r->arena,
                                   "torch.load(weights_only=True) of torch >= 2.6 refuses this: a "
                                   "TorchScript archive (%s; 'Cannot use weights_only=True with "
                                   "TorchScript archives'), which only torch.load with "
                                   "weights_only=False or torch.jit.load reads, running its code",
                                   w->member);
    if (!w->message) sc->nomem = 1;
}

/* Runs one stream from rg->p + pos (quiet: without events, to see whether
 * it parses). *used: bytes through STOP;
 * *frame_rest: bytes of the FRAME holding STOP after it; *events:
 * globals, calls and BUILDs seen; *value: 1 if it produced the legacy
 * magic number. Returns the machine's code (NOMEM also for our own
 * allocations); the literals it held are scanned before returning. */
static int run_stream(scanner *sc, const region *rg, size_t pos, int quiet, size_t *used,
                      size_t *frame_rest, uint64_t *events, int *legacy_magic) {
    ckpt_arena work = {0};
    stream s = {.sc = sc, .rg = rg, .work = &work};
    s.wo = !quiet && sc->wo_live && sc->r->wo.offset == CKPT_NO_OFFSET && !sc->r->wo.refused;
    if (s.wo && sc->ts_member) {
        torchscript_refusal(sc);
        s.wo = 0;
    }
    s.wo_op.offset = s.wo_at = CKPT_NO_OFFSET;
    pk_options o = {0};
    o.file = sc->file;
    o.member = rg->member;
    o.base_offset = rg->decoded ? 0 : rg->base + pos;
    o.limits = &sc->o.limits;
    o.arena = &work;
    o.persistent_load = placeholder_storage;
    o.on_event = quiet ? NULL : on_event;
    o.ctx = &s;
    o.scan_only = 1;
    o.frame_rest = frame_rest;
    o.budget = &sc->budget; /* the values die with `work`: nothing to charge */
    o.weights_only = s.wo ? &s.wo_op : NULL;
    ckpt_value *v = NULL;
    int rc = ckpt_pickle_run(&v, used, rg->p + pos, rg->n - pos, &o);
    if (sc->nomem) rc = CKPT_E_NOMEM;
    if (s.wo && rc != CKPT_E_NOMEM) weights_only_refusal(sc, rg, &s);
    *events = s.events;
    const char *dec = rc == 0 ? ckpt_value_int_decimal(v) : NULL;
    *legacy_magic = dec && strcmp(dec, LEGACY_MAGIC) == 0;
    /* the error record must survive the nested scans */
    ckpt_error saved = {0};
    char msg[MSG_CAP];
    if (rc && rc != CKPT_E_NOMEM) {
        const ckpt_error *e = ckpt_error_last();
        snprintf(msg, sizeof msg, "%s", e->message ? e->message : "");
        saved = *e;
        saved.message = msg;
    }
    for (size_t i = 0; i < s.nlits && rc != CKPT_E_NOMEM; i++) {
        int lrc = scan_literal(sc, rg, &work, &s.lits[i]);
        if (lrc == CKPT_E_NOMEM || sc->nomem) rc = CKPT_E_NOMEM;
    }
    ckpt_arena_free(&work);
    if (rc && rc != CKPT_E_NOMEM)
        ckpt_err(saved.code, saved.file, saved.member, saved.offset, "%s", saved.message);
    return rc;
}

/* 1 if every unpickler stops where the stream at rg->p + pos broke, with
 * nothing to interpret: the input ends, the byte is no opcode, or a
 * GLOBAL/INST name is not UTF-8 text (Python decodes names strictly). */
static int certain_stop(const region *rg, size_t pos, int rc, const ckpt_error *e) {
    if (rc == CKPT_E_TRUNCATED) return 1;
    uint64_t start = rg->decoded ? 0 : rg->base + pos;
    if (e->offset < start || e->offset - start >= rg->n - pos) return 0;
    uint8_t op = rg->p[pos + (size_t)(e->offset - start)];
    if (op == 'c' || op == 'i') return e->message && strstr(e->message, "UTF-8") != NULL;
    return !ckpt_pickle_is_opcode(op);
}

/* One stream of a region from its byte `pos`, run over a window of the
 * region's bytes (ckpt_source_window: a file's are read with pread, in a
 * window that grows while the stream runs past its end; what a run cut
 * short reported is undone). */
typedef struct stream_run {
    scanner *sc;
    const region *rg;
    size_t pos;
    int quiet_first; /* a quiet run first: content only sniffed */
    int need_start;  /* run only what starts like a stream */
    /* what the last run gave */
    int starts;  /* the bytes start like a stream */
    int rc;      /* run_stream's code */
    int proto;   /* they start with PROTO */
    int certain; /* certain_stop, when rc is an error */
    int magic;
    size_t used, frame_rest;
    uint64_t events;
} stream_run;

static int scan_window(void *ctx, const uint8_t *at, size_t len, int last) {
    stream_run *s = ctx;
    scanner *sc = s->sc;
    region w = *s->rg;
    w.p = at;
    w.n = len;
    w.base = s->rg->base + s->pos;
    s->starts = ckpt_scan_pickle_start(at, len);
    if (s->need_start && !s->starts) return 0;
    scan_mark m = {0};
    if (!last && mark_take(sc, &m)) return CKPT_E_NOMEM;
    s->used = s->frame_rest = 0;
    s->events = 0;
    s->magic = 0;
    int rc = 0;
    if (s->quiet_first)
        rc = run_stream(sc, &w, 0, 1, &s->used, &s->frame_rest, &s->events, &s->magic);
    if (rc == 0) rc = run_stream(sc, &w, 0, 0, &s->used, &s->frame_rest, &s->events, &s->magic);
    if (!last && rc == CKPT_E_TRUNCATED) {
        mark_undo(sc, &m);
        return rc; /* again over more bytes */
    }
    if (!last) mark_drop(&m);
    if (rc == CKPT_E_NOMEM) return rc;
    s->rc = rc;
    s->proto = len >= 2 && at[0] == 0x80;
    s->certain = rc && certain_stop(&w, 0, rc, ckpt_error_last());
    return 0;
}

/* The stream at rg's byte pos through scan_window; v: the window. 0, or
 * CKPT_E_NOMEM or the read's error. */
static int run_stream_at(stream_run *s, ckpt_view *v) {
    const region *rg = s->rg;
    size_t rest = rg->n - s->pos;
    /* a plain pickle file, and a member a loader unpickles by name (a
     * torch archive's data.pkl), is one stream: read whole at once (up
     * to CKPT_SOURCE_WINDOW_ALL) rather than parsed twice; a legacy
     * file's pickles are short, before its storages */
    int whole = rg->top ? !s->sc->legacy_head : !rg->sniffed && !rg->depth;
    size_t first = whole && s->pos == 0 && rest <= CKPT_SOURCE_WINDOW_ALL ? rest : 0;
    return ckpt_source_window(s->sc->src, v, rg->p + s->pos, rest, first, rg->member, scan_window,
                              s);
}

/* The log of the opened file's data.pkl when its events stand for those
 * of this scan's run of member e of z (format/pickle_log.h): z is the
 * directory open read, e the member the reader ran, the run's limits are
 * this scan's, and its budget is more than a scan-mode run of as many
 * opcodes can take (each allocates at most a value, an item and a
 * storage placeholder, which with the arena's blocks stay below 512
 * bytes, besides copies of its operands), so that it cannot fail where
 * the reader's did not. NULL: the scan runs it. */
static const pk_log *logged_run(const scanner *sc, const ckpt_zip *z, const ckpt_zip_entry *e) {
    const pk_log *log = sc->log;
    if (!log || !log->usable || sc->shard || z->entries != sc->opened->entries || e->method != 0 ||
        e->data_offset != log->base || e->csize != log->len)
        return NULL;
    const ckpt_limits *a = &log->limits, *b = &sc->o.limits;
    if (a->max_pickle_stack != b->max_pickle_stack || a->max_pickle_memo != b->max_pickle_memo ||
        a->max_pickle_ops != b->max_pickle_ops)
        return NULL;
    uint64_t need = log->ops < (UINT64_MAX >> 10) - log->len
                        ? (log->ops << 9) + 2 * (uint64_t)log->len
                        : UINT64_MAX;
    return need <= sc->budget ? log : NULL;
}

/* run_stream for the first stream of rg from the events of its log: the
 * same listener gets them in the same order, so the report is the one
 * its own run gives. */
static int replay_stream(scanner *sc, const region *rg, stream_run *out) {
    const pk_log *log = rg->log;
    ckpt_arena work = {0};
    stream s = {.sc = sc, .rg = rg, .work = &work};
    s.wo = sc->wo_live && sc->r->wo.offset == CKPT_NO_OFFSET && !sc->r->wo.refused;
    if (s.wo && sc->ts_member) {
        torchscript_refusal(sc);
        s.wo = 0;
    }
    s.wo_op = log->wo; /* none refused: the log is usable */
    s.wo_at = CKPT_NO_OFFSET;
    for (size_t i = 0; i < log->n; i++) {
        const pk_log_event *e = &log->ev[i];
        pk_event ev = {.kind = (pk_event_kind)e->kind,
                       .opcode = e->opcode,
                       .offset = e->offset,
                       .module = e->module,
                       .name = e->name,
                       .allowed = e->allowed,
                       .symbolic = e->symbolic,
                       .on_reference = e->on_reference};
        on_event(&s, &ev);
    }
    int rc = sc->nomem ? CKPT_E_NOMEM : 0;
    if (s.wo && rc == 0) weights_only_refusal(sc, rg, &s);
    ckpt_arena_free(&work); /* no literals: only calls keep them */
    if (sc->nomem) return CKPT_E_NOMEM;
    *out = (stream_run){.sc = sc,
                        .rg = rg,
                        .starts = 1,
                        .used = log->consumed,
                        .frame_rest = log->frame_rest,
                        .events = s.events + log->calls};
    return 0;
}

/* 1 if member is what torch.load unpickles in an archive: ARCHIVE/data.pkl
 * (or SHARD:ARCHIVE/data.pkl). */
static int is_data_pkl(const char *member) {
    const char *slash = strchr(member, '/');
    return slash && !strcmp(slash, "/data.pkl");
}

/* Scans rg as back-to-back pickle streams. A stream that some loader
 * unpickles (the first one of a file, a named or .npy member; each of a
 * legacy file's five) and that does not parse to its STOP makes the file
 * unscannable, with the offset where it breaks: the loader may read on
 * where ckpt cannot. Streams only guessed at (bytes after a STOP that no
 * loader reads, content sniffed by its shape, literals) that break before
 * any global or call are not pickles and are dropped; so is a file
 * without PROTO that every unpickler stops in before any global or call
 * (certain_stop): a PNG, a text file. */
static int scan_region(scanner *sc, const region *rg) {
    size_t pos = 0, streams = 0;
    int legacy = 0, rc = 0;
    ckpt_view v = {0};
    while (pos < rg->n) {
        if (legacy && streams == LEGACY_STREAMS) break; /* storage blobs */
        int loaded = legacy || (streams == 0 && !rg->sniffed && !rg->depth);
        uint64_t at = where(rg, rg->base + pos);
        if (streams > 0 && !legacy && !rg->depth)
            add_finding(sc, CKPT_SEVERITY_INFO, "trailing-bytes", NULL, rg->member, at,
                        "bytes after the pickle's STOP; scanned as another "
                        "stream where they parse as one");
        /* content taken for a pickle by its shape (a zip member no loader
         * unpickles by name) is one only if it parses to STOP: storage
         * bytes that start like a pickle raise nothing */
        stream_run s = {.sc = sc,
                        .rg = rg,
                        .pos = pos,
                        .quiet_first = rg->sniffed && !rg->depth && streams == 0,
                        .need_start = !loaded && streams > 0};
        sc->wo_live = loaded && !rg->depth && !rg->dcp_meta && (rg->top || is_data_pkl(rg->member));
        if ((rc = rg->log && pos == 0 ? replay_stream(sc, rg, &s) : run_stream_at(&s, &v))) break;
        if (s.need_start && !s.starts) break;
        if (s.rc == 0) {
            sc->content = 1;
            if (streams == 0 && rg->top && s.magic) legacy = 1;
            streams++;
            pos += s.used;
            if (legacy && streams < LEGACY_STREAMS && s.frame_rest) {
                add_finding(sc, CKPT_SEVERITY_INFO, "parse-error", NULL, rg->member,
                            where(rg, rg->base + pos),
                            "legacy pickle %zu ends inside a FRAME with %zu bytes after "
                            "its STOP: the next one starts here for a buffered file and "
                            "after the frame for io.BytesIO",
                            streams, s.frame_rest);
                sc->unscannable = 1;
                break;
            }
            continue;
        }
        const ckpt_error *e = ckpt_error_last();
        if (s.events == 0 && (!loaded || (rg->top && streams == 0 && !s.proto && s.certain))) {
            /* junk after a stream, content that only looked like a pickle:
             * said of a member, not of the file itself (the scanned file,
             * or a shard or slice scanned as a file: a safetensors header
             * length of 0x0280 starts like PROTO 2) */
            if (streams == 0 && !rg->depth && rg->sniffed &&
                strcmp(rg->member, file_member(sc)) != 0)
                add_finding(sc, CKPT_SEVERITY_INFO, "not-a-pickle", NULL, rg->member,
                            where(rg, e->offset),
                            "content starts like a pickle but does not parse: %s", e->message);
            break;
        }
        sc->content = 1;
        /* Everything before the break counts: an unpickler runs each
         * REDUCE as it reaches it, before the bad tail. */
        if (rg->depth) {
            add_finding(sc, CKPT_SEVERITY_INFO, "parse-error", NULL, rg->member,
                        where(rg, e->offset), "nested pickle breaks off: %s", e->message);
        } else {
            add_finding(sc, CKPT_SEVERITY_INFO, "parse-error", NULL, rg->member,
                        where(rg, e->offset),
                        "pickle stream cannot be parsed past this point (%s): %s",
                        ckpt_error_name(s.rc), e->message);
            sc->unscannable = 1;
        }
        break;
    }
    ckpt_view_free(&v);
    return rc;
}

/* ------------------------------------------------------------ containers */

/* An .npy file or member: np.load reads its header as numpy.lib.format
 * does (format/npy.h) and, for an object dtype, unpickles the data after
 * it. rg is the whole npy, whose header is read into v (with pread when
 * it is a file's; v may hold its first bytes already); *seen = 0 if rg is
 * no npy at all. */
static int scan_npy(scanner *sc, const region *rg, ckpt_view *v, int *seen) {
    ckpt_npy_header h;
    ckpt_arena work = {0};
    const uint8_t *b;
    uint64_t max = sc->o.limits.max_header_bytes;
    *seen = 0;
    /* the preamble, with what a usual header takes after it */
    int rc = ckpt_source_view(sc->src, v, rg->p, rg->n < 12 ? rg->n : 12, 244, rg->member, &b);
    if (rc == 0)
        rc = ckpt_source_view(sc->src, v, rg->p, ckpt_npy_header_bytes(b, rg->n, max), 0,
                              rg->member, &b);
    if (rc) return rc;
    int r = ckpt_npy_read_header(&h, &work, b, rg->n, max, sc->o.limits.max_depth);
    ckpt_arena_free(&work);
    if (r < 0) return CKPT_E_NOMEM;
    *seen = r;
    if (!r) return 0;
    sc->content = 1;
    switch (h.kind) {
    case CKPT_NPY_PLAIN: return 0; /* numbers only: np.load runs nothing */
    case CKPT_NPY_REFUSED:
        add_finding(sc, CKPT_SEVERITY_INFO, "npy-refused", NULL, rg->member,
                    where(rg, rg->base + h.at),
                    "numpy .npy header that np.load refuses (%s): it unpickles nothing", h.why);
        return 0;
    case CKPT_NPY_UNSURE:
        add_finding(sc, CKPT_SEVERITY_INFO, "npy-header", NULL, rg->member,
                    where(rg, rg->base + h.at),
                    "numpy .npy header that ckpt cannot read as numpy does (%s): "
                    "whether np.load unpickles its data is not known",
                    h.why);
        sc->unscannable = 1;
        return 0;
    case CKPT_NPY_OBJECT: break;
    }
    region sub = *rg;
    sub.p = rg->p + h.data_offset;
    sub.n = rg->n - h.data_offset;
    sub.base = rg->base + h.data_offset;
    sub.sniffed = 0;
    sub.top = 0;
    add_finding(sc, CKPT_SEVERITY_INFO, "npy-object", NULL, rg->member, where(rg, sub.base),
                "numpy object array: np.load(allow_pickle=True) unpickles the "
                "data that follows its header; scanned as a pickle");
    return scan_region(sc, &sub);
}

/* Another reader failed with rc, which the caller reports as a finding:
 * unless its read failed because the file shrank, which fails the scan
 * (CKPT_E_TRUNCATED recorded, naming the file and where it ends now). */
static int shrank(const scanner *sc, int rc) {
    return rc && rc != CKPT_E_NOMEM ? ckpt_source_check_size(sc->src) : 0;
}

/* The offset of another reader's error as a finding offset: the readers
 * may name where a structure would have been, past the end. */
static uint64_t in_file(uint64_t offset, size_t n) { return offset <= n ? offset : CKPT_NO_OFFSET; }

static int scan_safetensors(scanner *sc, const uint8_t *p, size_t n) {
    int rc = ckpt_safetensors_check(p, n, sc->src, sc->file, &sc->o.limits);
    if (rc == CKPT_E_NOMEM) return rc;
    int bad = shrank(sc, rc);
    if (bad) return bad;
    sc->content = 1;
    if (rc) {
        const ckpt_error *e = ckpt_error_last();
        add_finding(sc, CKPT_SEVERITY_INFO, "safetensors-error", NULL, file_member(sc),
                    in_file(e->offset, n), "safetensors header does not validate: %s", e->message);
        sc->unscannable = 1;
    }
    return 0;
}

/* ------------------------------------------------------------ zip */

/* Suffix test ignoring ASCII case, as torch's reader finds
 * "archive/data.pkl" under "archive/DATA.PKL". */
/* 1 if the n bytes at s end with suffix, a '.' and three lowercase ASCII
 * letters, in any ASCII case (a call per member of a 100k-member archive:
 * no strncasecmp). A byte ORed with 0x20 is a lowercase letter only when
 * it is that letter in either case. */
static int ends_with(const char *s, size_t n, const char suffix[5]) {
    if (n < 4) return 0;
    const unsigned char *p = (const unsigned char *)s + n - 4;
    return p[0] == '.' && (p[1] | 0x20) == (unsigned char)suffix[1] &&
           (p[2] | 0x20) == (unsigned char)suffix[2] && (p[3] | 0x20) == (unsigned char)suffix[3];
}

/* torch.jit.save archives: constants.pkl or code/ under the archive
 * folder (FORMATS.md §2.7). torch.load hands them to torch.jit.load. */
static int torchscript_marker(const ckpt_zip_entry *e, int constants_only) {
    const char *slash = memchr(e->name, '/', e->name_len);
    const char *rest = slash ? slash + 1 : e->name;
    return rest[0] == 'c' && (strcmp(rest, "constants.pkl") == 0 ||
                              (!constants_only && strncmp(rest, "code/", 5) == 0));
}

/* Stored members up to this size are read whole with one pread; of
 * larger ones, only what the scan looks at (their first and last bytes
 * unless they are scanned). */
#define MEMBER_WHOLE ((uint64_t)4096)
#define SNIFF_PEEK ((uint64_t)1 << 20)

static int scan_zip_readings(scanner *sc, const uint8_t *p, size_t n, int zip_start, int *seen);

/* Archives inside archives followed this deep (zip bombs are held by the
 * shared inflate budget). */
#define NESTED_ZIP_DEPTH 4

static int scan_tar(scanner *sc, const uint8_t *p, size_t n);

/* A member that is itself a zip archive (a model.pt or model.pkl zipped
 * inside the archive one downloads) or a tar one (torch < 0.4's format,
 * a tarred model.pkl: extracted, torch.load unpickles its members): its
 * members are scanned as the file's, named "MEMBER:INNER", their
 * offsets inside MEMBER as extracted, stored or deflated (one of
 * inflated bytes was the member's data in the file for every finding).
 * *done: it was one. A zip in a zip holding a hostile model.pt, and a zip
 * holding a tar of a hostile model.pkl, were NOT-A-CHECKPOINT. One view
 * of the first block serves both sniffs. */
static int scan_nested_archive(scanner *sc, const region *rg, ckpt_view *mv, int *done) {
    const uint8_t *b = rg->p;
    size_t head = rg->n < 512 ? rg->n : 512;
    *done = 0;
    if (rg->n < 4) return 0;
    int rc = rg->decoded ? 0 : ckpt_source_view(sc->src, mv, rg->p, head, 0, rg->member, &b);
    if (rc) return rc;
    int zip = memcmp(b, "PK\3\4", 4) == 0;
    if (!zip && (head < 512 || ckpt_tar_sniff(b, head) == CKPT_TAR_NO)) return 0;
    *done = 1;
    if (sc->zip_depth >= NESTED_ZIP_DEPTH) {
        add_finding(sc, CKPT_SEVERITY_INFO, "nested-zip", NULL, rg->member,
                    rg->decoded ? rg->at : rg->base, "%s archive nested %d deep: not examined",
                    zip ? "zip" : "tar", NESTED_ZIP_DEPTH + 1);
        sc->unscannable = 1;
        return 0;
    }
    const ckpt_source *src = sc->src;
    const ckpt_zip *opened = sc->opened;
    const char *shard = sc->shard;
    if (rg->decoded) sc->src = NULL; /* inflated bytes, in memory */
    sc->opened = NULL;
    sc->shard = rg->member;
    sc->zip_depth++;
    if (zip)
        rc = scan_zip_readings(sc, rg->p, rg->n, 0, done); /* 0: tensor bytes, say */
    else
        rc = scan_tar(sc, rg->p, rg->n);
    sc->zip_depth--;
    sc->src = src;
    sc->opened = opened;
    sc->shard = shard;
    return rc;
}

/* A member's name in findings: "HOLDER:NAME" inside a shard, a nested
 * archive or a DCP bytes item, else NAME. NULL: out of memory. */
static const char *member_name(scanner *sc, const ckpt_zip_entry *e) {
    return sc->shard ? ckpt_arena_printf(&sc->r->arena, "%s:%s", sc->shard, e->name)
                     : ckpt_arena_strdup(&sc->r->arena, e->name);
}

/* One member: read it the way torch would (flags ignored), then scan it
 * if it is named or shaped like a pickle. Its bytes, when they are a
 * file's, are read into mv. */
static int scan_member(scanner *sc, const ckpt_zip *z, const ckpt_zip_entry *e,
                       ckpt_arena *inflated, ckpt_view *mv) {
    const char *member = member_name(sc, e);
    if (!member) return CKPT_E_NOMEM;
    int named = ends_with(e->name, e->name_len, ".pkl");
    int npy = ends_with(e->name, e->name_len, ".npy");
    int encrypted = (e->flags & (ZIP_FLAG_ENCRYPTED | ZIP_FLAG_STRONG)) != 0;
    if (e->local_name_differs)
        add_finding(sc, CKPT_SEVERITY_INFO, "name-mismatch", NULL, member, e->local_offset,
                    "the local header names another file than the central "
                    "directory; torch goes by the central directory");
    if (e->flags & (ZIP_FLAG_ENCRYPTED | ZIP_FLAG_PATCHED | ZIP_FLAG_STRONG))
        add_finding(sc, CKPT_SEVERITY_INFO, "zip-flags", NULL, member, e->local_offset,
                    "general-purpose flags 0x%04x mark the member encrypted or "
                    "patched; torch ignores them, so stored content is scanned "
                    "as it is",
                    e->flags);
    region rg = {0};
    rg.member = member;
    rg.sniffed = !named;
    if (e->method == 0) {
        /* zip.c checked csize bytes lie inside the input */
        rg.p = z->buf + e->data_offset;
        rg.n = (size_t)e->csize;
        rg.base = e->data_offset;
        int rc = e->csize <= MEMBER_WHOLE ? ckpt_source_view(sc->src, mv, rg.p, rg.n,
                                                             ckpt_zip_dense_ahead(z), member, &rg.p)
                                          : 0;
        if (rc) return rc;
        if (e->csize != e->usize)
            add_finding(sc, CKPT_SEVERITY_INFO, "size-mismatch", NULL, member, e->data_offset,
                        "stored member declares %llu compressed and %llu "
                        "uncompressed bytes; the %llu stored bytes are scanned",
                        (unsigned long long)e->csize, (unsigned long long)e->usize,
                        (unsigned long long)e->csize);
    } else if (e->method == 8 && !encrypted && !named && !npy && e->usize > SNIFF_INFLATE_MAX) {
        /* No loader unpickles it by name; inflating it only to sniff its
         * bytes would cost what a bomb asks. */
        add_finding(sc, CKPT_SEVERITY_INFO, "not-inflated", NULL, member, e->data_offset,
                    "deflated member of %llu bytes is not named like a pickle or "
                    "numpy array and is not inflated to be sniffed",
                    (unsigned long long)e->usize);
        sc->unscannable = 1;
        return 0;
    } else if (e->method == 8 && !encrypted) {
        int rc = ckpt_zip_read(z, e, inflated, &sc->budget, &rg.p);
        if (rc == CKPT_E_NOMEM) return rc;
        int bad = shrank(sc, rc);
        if (bad) return bad;
        if (rc) {
            add_finding(sc, CKPT_SEVERITY_INFO, "unreadable-member", NULL, member, e->data_offset,
                        "deflated member cannot be examined: %s", ckpt_error_last()->message);
            sc->unscannable = 1;
            return 0;
        }
        rg.n = (size_t)e->usize;
        rg.decoded = 1;
        rg.at = e->data_offset;
    } else {
        if (encrypted)
            add_finding(sc, CKPT_SEVERITY_INFO, "encrypted", NULL, member, e->data_offset,
                        "encrypted compressed member: its content cannot be "
                        "examined");
        else
            add_finding(sc, CKPT_SEVERITY_INFO, "unreadable-member", NULL, member, e->data_offset,
                        "compression method %u is not supported: the member "
                        "cannot be examined",
                        e->method);
        sc->unscannable = 1;
        return 0;
    }
    /* a large stored member is sniffed here, its first and last bytes:
     * pages read for that alone leave the cache again (base/source.h;
     * from the size zip.c peeks local headers at) */
    mv->peek = e->method == 0 && rg.n >= SNIFF_PEEK;
    int shape, rc = ckpt_scan_pickle_shape_at(sc->src, mv, rg.p, rg.n, &shape);
    if (rc) return rc;
    if (encrypted && !shape) {
        add_finding(sc, CKPT_SEVERITY_INFO, "encrypted", NULL, member, e->data_offset,
                    "encrypted member: its content cannot be read as a pickle");
        sc->unscannable = 1;
        return 0;
    }
    if (!named && !shape) {
        int seen, zip;
        if ((rc = scan_nested_archive(sc, &rg, mv, &zip)) || zip) return rc;
        return scan_npy(sc, &rg, mv, &seen);
    }
    mv->peek = 0;
    /* Only for members scanned anyway: a storage's CRC is verify's job.
     * Open's reads of the file gave it for what they read (crc_seen). */
    int crc = !ckpt_zip_crc_recorded(e) || (e->method != 8 && e->csize != e->usize) ? 0
              : e->crc_seen && e->method == 0 ? (e->crc_read != e->crc32 ? CKPT_E_CHECKSUM : 0)
                                              : ckpt_zip_check_crc(z, e, rg.p);
    if ((rc = shrank(sc, crc))) return rc;
    if (crc)
        add_finding(sc, CKPT_SEVERITY_INFO, "crc-mismatch", NULL, member, e->data_offset,
                    "CRC-32 differs from the central directory; torch does not "
                    "check it, so the content is scanned");
    if (named) rg.log = logged_run(sc, z, e);
    return scan_region(sc, &rg);
}

static int scan_zip(scanner *sc, const ckpt_zip *z) {
    if (z->has_duplicates) {
        /* miniz finds one of them (ignoring case), zipfile the last of an
         * exact name: every one is scanned, but readers disagree */
        add_finding(sc, CKPT_SEVERITY_INFO, "duplicate-name", NULL, file_member(sc), 0,
                    "two members share a name (ignoring ASCII case): zip readers "
                    "load different ones; every one of them is scanned");
        sc->unscannable = 1;
    }
    for (size_t i = 0; i < z->count; i++) {
        const ckpt_zip_entry *e = &z->entries[i];
        if (!torchscript_marker(e, 0)) continue;
        const char *member = member_name(sc, e);
        if (!member) return CKPT_E_NOMEM;
        add_finding(sc, CKPT_SEVERITY_DANGEROUS, "torchscript", NULL, member, e->local_offset,
                    "TorchScript archive (torch.jit.save): torch.load hands it "
                    "to torch.jit.load, which runs its code");
        break;
    }
    /* torch.load's own test (_is_torchscript_zip): a constants.pkl record */
    const char *outer_ts = sc->ts_member;
    uint64_t outer_ts_offset = sc->ts_offset;
    sc->ts_member = NULL;
    for (size_t i = 0; !sc->ts_member && i < z->count; i++)
        if (torchscript_marker(&z->entries[i], 1)) {
            if (!(sc->ts_member = member_name(sc, &z->entries[i]))) return CKPT_E_NOMEM;
            sc->ts_offset = z->entries[i].local_offset;
        }
    int had_content = sc->content, was_unscannable = sc->unscannable;
    ckpt_view mv = {0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < z->count; i++) {
        ckpt_arena inflated = {0};
        rc = scan_member(sc, z, &z->entries[i], &inflated, &mv);
        ckpt_arena_free(&inflated);
    }
    ckpt_view_free(&mv);
    sc->ts_member = outer_ts;
    sc->ts_offset = outer_ts_offset;
    if (rc) return rc;
    if (!had_content && !sc->content && !was_unscannable && !sc->unscannable)
        add_finding(sc, CKPT_SEVERITY_INFO, "no-pickle", NULL, file_member(sc), 0,
                    "zip archive without any pickle member");
    return 0;
}

/* Whether the directory open read of the file is miniz's reading of
 * p[0..n), as ckpt_zip_open_reading(CKPT_ZIP_MINIZ) would give it here:
 * torch's reading is miniz's, refused where zipfile reads another
 * (container/zip.h), so one that succeeded has the same entries, in the
 * same order, and readings_differ 0. Of the scan's limits only
 * max_zip_entries bears on the directory: a count past it is read again,
 * to be refused as before. Copied into *z. */
static int reuse_opened(const scanner *sc, const uint8_t *p, size_t n, ckpt_zip *z) {
    const ckpt_zip *o = sc->opened;
    if (!o || sc->shard || o->buf != p || o->len != n || o->src != sc->src || o->readings_differ)
        return 0;
    if (sc->o.limits.max_zip_entries && o->count > sc->o.limits.max_zip_entries) return 0;
    *z = *o;
    z->reading = CKPT_ZIP_MINIZ;
    return 1;
}

/* Scans the members of miniz's reading of p (torch) and, where Python's
 * zipfile reads another directory, of that one too. *seen: some reading
 * succeeded. A file that starts as an archive (zip_start) and that
 * neither reads is reported (the caller calls it unscannable). */
static int scan_zip_readings(scanner *sc, const uint8_t *p, size_t n, int zip_start, int *seen) {
    ckpt_zip z, y;
    *seen = 0;
    int rc = reuse_opened(sc, p, n, &z)
                 ? 0
                 : ckpt_zip_open_reading(&z, &sc->scratch, p, n, sc->src, sc->file, &sc->o.limits,
                                         CKPT_ZIP_MINIZ);
    if (rc == CKPT_E_NOMEM) return rc;
    int bad = shrank(sc, rc);
    if (bad) return bad;
    /* the error record must survive the other reading */
    ckpt_error saved = *ckpt_error_last();
    char msg[MSG_CAP];
    snprintf(msg, sizeof msg, "%s", saved.message ? saved.message : "");
    if (rc == 0) {
        *seen = 1;
        if ((rc = scan_zip(sc, &z))) return rc;
    }
    if (*seen && !z.readings_differ) return 0;
    int rc2 = ckpt_zip_open_reading(&y, &sc->scratch, p, n, sc->src, sc->file, &sc->o.limits,
                                    CKPT_ZIP_ZIPFILE);
    if (rc2 == CKPT_E_NOMEM) return rc2;
    if ((bad = shrank(sc, rc2))) return bad;
    if (rc2 == 0) {
        /* Two readings: both are scanned, and a third reader may differ
         * again, so the file is not called safe. */
        if (y.shift)
            add_finding(sc, CKPT_SEVERITY_INFO, "polyglot", NULL, file_member(sc), 0,
                        "%llu bytes come before the zip archive: torch's reader "
                        "takes its offsets as absolute%s, Python's zipfile shifts "
                        "them and reads its members; they are scanned, but zip "
                        "readers disagree on this file",
                        (unsigned long long)y.shift,
                        *seen ? " and reads another directory" : " and cannot read it");
        else
            add_finding(sc, CKPT_SEVERITY_INFO, "zip-readings", NULL, file_member(sc), 0,
                        "torch's reader (miniz) and Python's zipfile read different "
                        "directories from this archive; the members of both are "
                        "scanned, but zip readers disagree on this file");
        sc->unscannable = 1;
        *seen = 1;
        return scan_zip(sc, &y);
    }
    if (!*seen && zip_start)
        add_finding(sc, CKPT_SEVERITY_INFO, "zip-error", NULL, file_member(sc),
                    in_file(saved.offset, n), "zip archive cannot be read: %s", msg);
    return 0;
}

/* ------------------------------------------------------------ legacy tar */

/* What one pickle of a legacy tar member gives torch (read in full mode,
 * which builds values but runs nothing): an int, or the element size of
 * the storage class that the third item of a (key, location, type) tuple
 * names. */
typedef struct tar_run {
    scanner *sc;
    const region *rg;
    size_t pos;
    int want_esize;
    int64_t *out;
    int shape; /* 0, or 1 when the stream is not of that shape */
} tar_run;

static int tar_window(void *ctx, const uint8_t *at, size_t len, int last) {
    tar_run *t = ctx;
    scanner *sc = t->sc;
    ckpt_arena work = {0};
    pk_options o = {0};
    o.file = sc->file;
    o.member = t->rg->member;
    o.base_offset = t->rg->base + t->pos;
    o.limits = &sc->o.limits;
    o.arena = &work;
    o.budget = &sc->budget;
    ckpt_value *v = NULL;
    size_t used;
    int rc = ckpt_pickle_run(&v, &used, at, len, &o);
    t->shape = 1;
    if (rc == 0 && !t->want_esize) {
        t->shape = ckpt_value_int(v, t->out) == 0 ? 0 : 1;
    } else if (rc == 0 && v->kind == CKPT_KIND_TUPLE && v->u.seq.n == 3 &&
               v->u.seq.items[2]->kind == CKPT_KIND_GLOBAL_) {
        unsigned esz =
            ckpt_dtype_size(ckpt_dtype_from_storage_class(v->u.seq.items[2]->u.global.name));
        *t->out = esz;
        t->shape = esz ? 0 : 1;
    }
    ckpt_arena_free(&work);
    if (rc == CKPT_E_NOMEM || (rc == CKPT_E_TRUNCATED && !last)) return rc;
    return 0;
}

/* 0 with *out, 1 when the stream at rg's `pos` is not of that shape, or
 * CKPT_E_NOMEM or the read's error. */
static int tar_value(scanner *sc, const region *rg, size_t pos, int want_esize, int64_t *out) {
    tar_run t = {sc, rg, pos, want_esize, out, 1};
    ckpt_view v = {0};
    int rc =
        ckpt_source_window(sc->src, &v, rg->p + pos, rg->n - pos, 0, rg->member, tar_window, &t);
    ckpt_view_free(&v);
    return rc ? rc : t.shape;
}

/* Why torch stops reading a member (and the archive) at rg's byte `pos`;
 * for findings. */
static void tar_stop(scanner *sc, const region *rg, size_t pos, int unscannable, const char *what) {
    add_finding(sc, CKPT_SEVERITY_INFO, unscannable ? "tar-unfollowed" : "tar-stops", NULL,
                rg->member, rg->base + pos, "%s", what);
    if (unscannable) sc->unscannable = 1;
}

/* Scans one pickle stream of a tar member at rg's `pos`; *used: its
 * bytes. 1: scanned; 0: it does not parse (reported, unscannable: torch
 * runs what comes before the break); <0: out of memory, or a read
 * failed. */
static int tar_stream(scanner *sc, const region *rg, size_t pos, size_t *used) {
    stream_run s = {.sc = sc, .rg = rg, .pos = pos};
    ckpt_view v = {0};
    int rc = run_stream_at(&s, &v);
    ckpt_view_free(&v);
    if (rc) return rc;
    rc = s.rc;
    *used = s.used;
    if (rc == 0 && s.frame_rest) {
        /* where the next read starts depends on how the file is buffered */
        tar_stop(sc, rg, pos + *used, 1,
                 "a pickle ends inside a FRAME with bytes after its "
                 "STOP: where torch reads on is not known");
        return 0;
    }
    if (rc == 0) return 1;
    const ckpt_error *e = ckpt_error_last();
    add_finding(sc, CKPT_SEVERITY_INFO, "parse-error", NULL, rg->member, e->offset,
                "pickle stream cannot be parsed past this point (%s): %s", ckpt_error_name(rc),
                e->message);
    sc->unscannable = 1;
    return 0;
}

/* The "storages" (storages = 1) or "tensors" member as legacy_load reads
 * it: a count pickle, then per item a pickle and raw bytes (a storage's
 * int64 element count and elements; a tensor's int32 ndim, 4 bytes, ndim
 * sizes and strides, an offset), then for storages a pickle of views.
 * *go: torch reads on past this member. */
static int tar_walk(scanner *sc, const region *rg, int storages, int *go) {
    size_t pos = 0, used;
    int64_t count, x;
    *go = 0;
    int rc = tar_stream(sc, rg, pos, &used);
    if (rc <= 0) return rc;
    if ((rc = tar_value(sc, rg, pos, 0, &count)) < 0) return rc;
    if (rc || count < 0) {
        tar_stop(sc, rg, pos, 1,
                 "the count pickle does not give a non-negative int: "
                 "what torch reads next is not known");
        return 0;
    }
    pos += used;
    for (int64_t i = 0; i < count; i++) {
        if (pos >= rg->n) {
            tar_stop(sc, rg, pos, 0,
                     "the member ends before its count of items: torch.load fails here");
            return 0;
        }
        if ((rc = tar_stream(sc, rg, pos, &used)) <= 0) return rc;
        if (storages) {
            if ((rc = tar_value(sc, rg, pos, 1, &x)) < 0) return rc;
            if (rc) {
                tar_stop(sc, rg, pos, 1,
                         "a storage pickle that is no (key, location, "
                         "storage class) tuple: its bytes cannot be skipped");
                return 0;
            }
        }
        pos += used;
        /* storage: int64 LE element count, then the elements; tensor:
         * int32 LE ndim, 4 bytes, ndim sizes and strides, an offset */
        uint64_t skip = 0, le = 0;
        size_t width = storages ? 8 : 4;
        uint8_t raw[8];
        if (width > rg->n - pos) width = rg->n - pos;
        if ((rc = ckpt_source_read(sc->src, rg->p + pos, raw, width, rg->member))) return rc;
        for (size_t b = 0; b < width; b++) le |= (uint64_t)raw[b] << (8 * b);
        int fits = rg->n - pos >= 8;
        if (storages)
            fits = fits && !ckpt_mul_overflow(le, (uint64_t)x, &skip) && skip <= rg->n - pos - 8 &&
                   (skip += 8, 1);
        else
            fits = fits && le < 0x80000000u && (skip = 8 + 16 * le + 8) <= rg->n - pos;
        if (!fits) {
            tar_stop(sc, rg, pos, 0,
                     storages ? "a storage's bytes run past the member: "
                                "torch.load fails here"
                              : "a tensor's sizes run past the member: "
                                "torch.load fails here");
            return 0;
        }
        pos += (size_t)skip;
    }
    if (storages) {
        if ((rc = tar_stream(sc, rg, pos, &used)) <= 0) return rc;
    }
    *go = 1;
    return 0;
}

/* The members torch.load reads of a legacy tar (FORMATS.md §3.2): it
 * extracts "storages" and "tensors" and unpickles their streams, then
 * unpickles "pickle", as far as it gets. walked[k]: the member of
 * order[k] scanned so, else NULL. */
static const char *const tar_order[] = {"storages", "tensors", "pickle"};

static int tar_legacy(scanner *sc, const ckpt_tar *t, const uint8_t *p,
                      const ckpt_tar_member *walked[3]) {
    for (size_t k = 0; k < 3; k++) {
        const ckpt_tar_member *m = ckpt_tar_find(t, tar_order[k]);
        if (!m || m->type == '5' || m->type == '6') {
            add_finding(sc, CKPT_SEVERITY_INFO, "tar-stops", NULL, file_member(sc),
                        m ? m->header : 0, "no regular member \"%s\": torch.load fails there",
                        tar_order[k]);
            return 0;
        }
        walked[k] = m;
        region rg = {.p = p + m->data, .n = (size_t)m->size, .base = m->data};
        rg.member = sc->shard ? ckpt_arena_printf(&sc->r->arena, "%s:%s", sc->shard, tar_order[k])
                              : ckpt_arena_strdup(&sc->r->arena, tar_order[k]);
        if (!rg.member) return CKPT_E_NOMEM;
        int go = 0, rc;
        size_t used;
        if (k < 2) {
            sc->tar_types = 1;
            rc = tar_walk(sc, &rg, k == 0, &go);
            sc->tar_types = 0;
        } else {
            rc = tar_stream(sc, &rg, 0, &used); /* one Unpickler.load */
            rc = rc < 0 ? rc : 0;
        }
        if (rc) return rc;
        if (!go) return 0;
    }
    return 0;
}

/* Every other regular member, as a zip's members are scanned: one named
 * .pkl or holding a pickle (joblib.load, pickle.load of it once
 * extracted) and .npy object arrays. */
static int tar_others(scanner *sc, const ckpt_tar *t, const uint8_t *p,
                      const ckpt_tar_member *const walked[3]) {
    ckpt_view v = {0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < t->count; i++) {
        const ckpt_tar_member *m = &t->members[i];
        if (m == walked[0] || m == walked[1] || m == walked[2] ||
            (m->type != '0' && m->type != '\0' && m->type != '7'))
            continue;
        region rg = {.p = p + m->data, .n = (size_t)m->size, .base = m->data};
        rg.member = sc->shard ? ckpt_arena_printf(&sc->r->arena, "%s:%s", sc->shard, m->name)
                              : ckpt_arena_strdup(&sc->r->arena, m->name);
        if (!rg.member) {
            rc = CKPT_E_NOMEM;
            break;
        }
        rg.sniffed = !ends_with(m->name, m->name_len, ".pkl");
        int shape, seen;
        if ((rc = ckpt_scan_pickle_shape_at(sc->src, &v, rg.p, rg.n, &shape))) break;
        rc = !rg.sniffed || shape ? scan_region(sc, &rg) : scan_npy(sc, &rg, &v, &seen);
    }
    ckpt_view_free(&v);
    return rc;
}

/* A file tarfile opens: torch < 0.4's format. torch.load reads the
 * members tar_legacy scans; on a TarError it reads the file as stacked
 * pickles instead (scanned by the caller). */
static int scan_tar(scanner *sc, const uint8_t *p, size_t n) {
    ckpt_tar t;
    int rc = ckpt_tar_read(&t, &sc->scratch, p, n, sc->src, sc->o.limits.max_zip_entries);
    if (rc) return rc;
    if (t.answer == CKPT_TAR_NO) return 0;
    sc->content = 1;
    if (t.answer == CKPT_TAR_UNSURE) {
        add_finding(sc, CKPT_SEVERITY_INFO, "tar-unfollowed", NULL, file_member(sc), t.at,
                    "tar archive (the torch < 0.4 format) with %s: which members "
                    "torch.load unpickles is not known",
                    t.why);
        sc->unscannable = 1;
        return 0;
    }
    if (t.listing_fails) {
        add_finding(sc, CKPT_SEVERITY_INFO, "tar-stops", NULL, file_member(sc), t.at,
                    "tar archive whose listing fails (%s): torch.load reads the file "
                    "as a pickle instead",
                    t.why);
        return 0;
    }
    add_finding(sc, CKPT_SEVERITY_INFO, "legacy-tar", NULL, file_member(sc), 0,
                "tar archive (the torch < 0.4 format): the members torch.load "
                "unpickles (storages, tensors, pickle) are scanned, and every "
                "other member that holds a pickle");
    const ckpt_tar_member *walked[3] = {NULL, NULL, NULL};
    if ((rc = tar_legacy(sc, &t, p, walked))) return rc;
    return tar_others(sc, &t, p, walked);
}

/* ------------------------------------------------------------ sharded */

static int scan_file(scanner *sc, const uint8_t *p, size_t n);

/* A note when the file `path` of a set (a shard `name`, a DCP data file)
 * is a link out of the directory: loaders follow it, and so does the
 * scan. */
static void note_link(scanner *sc, const char *name, const char *path, const char *what,
                      const char *dir) {
    char target[512];
    if (ckpt_shard_outside(sc->dir, path, target, sizeof target))
        add_finding(sc, CKPT_SEVERITY_INFO, "shard-link", NULL, name, CKPT_NO_OFFSET,
                    "%s is a link to a file outside the %s (%s); loaders follow it, and so "
                    "does the scan",
                    what, dir, target);
}

/* One shard, scanned like a file of its own; its findings are named by
 * the shard (and "SHARD:MEMBER" for members of a zip shard). */
static int scan_shard(scanner *sc, const char *name) {
    const char *shard = ckpt_arena_strdup(&sc->r->arena, name);
    const char *path = ckpt_arena_printf(&sc->scratch, "%s/%s", sc->dir, name);
    if (!shard || !path) return CKPT_E_NOMEM;
    note_link(sc, shard, path, "shard", "index's directory");
    ckpt_file *f;
    int rc = ckpt_file_open_raw(&f, path, NULL);
    if (rc && ckpt_error_last()->os_errno == ENOENT) {
        /* a shard that is not there holds no code: the loader's open
         * fails before anything of it is read (a stale index, e.g. the
         * .bak convert --backup keeps); verify of the set reports it */
        add_finding(sc, CKPT_SEVERITY_INFO, "shard-missing", NULL, shard, CKPT_NO_OFFSET,
                    "shard file does not exist: loading the index fails there and runs "
                    "nothing of it (`ckpt verify` of the set reports it)");
        return 0;
    }
    if (rc) {
        add_finding(sc, CKPT_SEVERITY_INFO, "shard-unreadable", NULL, shard, CKPT_NO_OFFSET,
                    "shard file cannot be read: %s", ckpt_error_last()->message);
        sc->unscannable = 1;
        return 0;
    }
    if (ckpt_arena_grow(&sc->r->arena, (void **)&sc->r->shards, &sc->r->shardcap,
                        sc->r->nshards + 1, sizeof *sc->r->shards))
        return CKPT_E_NOMEM;
    sc->r->shards[sc->r->nshards++] = shard;
    sc->shard = shard;
    sc->content = 0;
    uint64_t budget = sc->budget; /* each file has its own */
    const ckpt_source *src = sc->src;
    sc->budget = ckpt_zip_budget(&sc->o.limits, f->map_size);
    sc->src = &f->source;
    rc = scan_file(sc, f->map, f->map_size);
    if (rc == 0) rc = ckpt_source_check_size(&f->source);
    sc->src = src;
    sc->budget = budget;
    if (rc == 0 && !sc->content) {
        add_finding(sc, CKPT_SEVERITY_INFO, "shard-not-a-checkpoint", NULL, shard, 0,
                    "shard holds no pickle, zip archive or safetensors header");
        sc->unscannable = 1;
    }
    sc->shard = NULL;
    sc->content = 1; /* the index is content */
    ckpt_close(f);
    return rc;
}

static int scan_index_doc(scanner *sc, const uint8_t *doc, size_t n);

/* A sharded index ("*.safetensors.index.json", "*.bin.index.json"): its
 * weight_map names the shard files a loader opens (HF transformers:
 * safetensors.load_file for .safetensors shards, torch.load for others),
 * so the index is as safe as the shards it lists: each distinct shard is
 * scanned once (one that does not exist holds nothing that runs). JSON
 * that is no index is no checkpoint. */
static int scan_index(scanner *sc, const uint8_t *p, size_t n) {
    if (sc->shard) {
        sc->content = 1;
        sc->unscannable = 1;
        add_finding(sc, CKPT_SEVERITY_INFO, "index-error", NULL, sc->shard, 0,
                    "a shard is JSON text, expected a checkpoint file");
        return 0;
    }
    if (n > sc->o.limits.max_index_bytes) {
        sc->content = 1;
        sc->unscannable = 1;
        add_finding(sc, CKPT_SEVERITY_INFO, "index-error", NULL, "", 0,
                    "JSON index of %zu bytes exceeds the limit max_index_bytes = %llu", n,
                    (unsigned long long)sc->o.limits.max_index_bytes);
        return 0;
    }
    /* read whole (with pread when it is a file's), as the loaders read it:
     * json.load, then index["weight_map"] */
    ckpt_view v = {0};
    const uint8_t *doc;
    int rc = ckpt_source_view(sc->src, &v, p, n, 0, "", &doc);
    if (rc == 0) rc = scan_index_doc(sc, doc, n);
    ckpt_view_free(&v);
    return rc;
}

/* scan_index of the index's text doc[0..n). */
static int scan_index_doc(scanner *sc, const uint8_t *doc, size_t n) {
    ckpt_index ix;
    int rc = ckpt_index_read(&ix, &sc->scratch, doc, n, sc->file, sc->o.limits.max_depth);
    if (rc == CKPT_E_NOMEM) return rc;
    if (rc == CKPT_E_LIMIT) {
        sc->unscannable = 1;
        add_finding(sc, CKPT_SEVERITY_INFO, "index-error", NULL, "",
                    in_file(ckpt_error_last()->offset, n), "%s", ckpt_error_last()->message);
        return 0;
    }
    if (rc) {
        add_finding(
            sc, CKPT_SEVERITY_INFO, "not-an-index", NULL, "", in_file(ckpt_error_last()->offset, n),
            "%s: no loader reads it as a sharded checkpoint index", ckpt_error_last()->message);
        return 0;
    }
    if (!ix.has_weight_map) {
        add_finding(sc, CKPT_SEVERITY_INFO, "not-an-index", NULL, "", 0,
                    "JSON text without a \"weight_map\" object: not a sharded "
                    "checkpoint index");
        return 0;
    }
    if (ix.non_strings) {
        add_finding(sc, CKPT_SEVERITY_INFO, "shard-name", NULL, "", ix.first_non_string,
                    "weight_map holds %zu values that are not strings: which files a "
                    "loader opens is not known",
                    ix.non_strings);
        sc->unscannable = 1;
    }
    const char **names = ckpt_arena_array(&sc->scratch, ix.nshards + 1, sizeof *names);
    if (!names) return CKPT_E_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < ix.nshards; i++) {
        const ckpt_index_shard *sh = &ix.shards[i];
        /* the reader's rule (open/sharded.c), any extension: each shard
         * once, however the index spells it */
        char *canon = ckpt_arena_alloc(&sc->scratch, sh->len + 1);
        if (!canon) return CKPT_E_NOMEM;
        const char *why = sh->surrogate ? "holds a lone surrogate (no UTF-8 file name)"
                                        : ckpt_shard_name(canon, sh->name, sh->len, NULL);
        if (why) {
            add_finding(sc, CKPT_SEVERITY_INFO, "shard-name", NULL, "", sh->offset,
                        "weight_map value \"%.200s\": the shard name is %s; a file "
                        "outside the index's directory is not scanned",
                        sh->name, why);
            sc->unscannable = 1;
            continue;
        }
        names[k++] = canon;
    }
    /* distinct names: many tensors share a shard */
    if (k > 1) qsort(names, k, sizeof *names, cmp_str);
    size_t distinct = 0;
    for (size_t i = 0; i < k; i++)
        if (distinct == 0 || strcmp(names[distinct - 1], names[i]) != 0)
            names[distinct++] = names[i];
    if (distinct == 0) {
        /* nothing a loader would open: no checkpoint content */
        add_finding(sc, CKPT_SEVERITY_INFO, "sharded-index", NULL, "", 0,
                    "sharded index listing no shard file");
        return 0;
    }
    if (!sc->dir) {
        /* the buffer itself holds nothing a loader runs; its shards are
         * other files, which only a scan from a path can reach */
        add_finding(sc, CKPT_SEVERITY_INFO, "sharded-index", NULL, "", 0,
                    "sharded index of %zu shard files, which are not scanned: "
                    "scan the index from its path (ckpt_scan) to scan them",
                    distinct);
    } else {
        sc->content = 1;
        size_t before = sc->r->nshards;
        for (size_t i = 0; rc == 0 && i < distinct; i++) rc = scan_shard(sc, names[i]);
        size_t scanned = sc->r->nshards - before;
        if (scanned == distinct)
            add_finding(sc, CKPT_SEVERITY_INFO, "sharded-index", NULL, "", 0,
                        "sharded index: its %zu shard files were scanned (findings in a "
                        "shard name it as their member)",
                        distinct);
        else
            add_finding(sc, CKPT_SEVERITY_INFO, "sharded-index", NULL, "", 0,
                        "sharded index: %zu of its %zu shard files were scanned (findings "
                        "in a shard name it as their member; the others' say why not)",
                        scanned, distinct);
    }
    return rc;
}

/* ------------------------------------------------------------ DCP */

/* scanner.dcp: the file is a directory's .metadata (1), rank 0's of a
 * save with use_collectives=False, or stands for a directory without
 * metadata, or for HuggingFaceStorageWriter's sharded layout */
#define DCP_NO_METADATA 2
#define DCP_RANKS 3
#define DCP_NO_RANK0 4
#define DCP_HF 5
/* Bytes of one data file that its slices may scan beyond twice its size. */
#define DCP_SCAN_SLACK ((uint64_t)1 << 20)

typedef struct dcp_slice {
    const char *name; /* canonical, relative to the directory */
    uint64_t offset, length;
    int is_bytes; /* a bytes item's (torch.save'd object) */
} dcp_slice;

static int by_slice(const void *x, const void *y) {
    const dcp_slice *a = x, *b = y;
    int c = strcmp(a->name, b->name);
    if (c) return c;
    if (a->offset != b->offset) return (a->offset > b->offset) - (a->offset < b->offset);
    /* torch.load reads a bytes item as the whole slice (a zip's end record
     * is found from the slice's end): slices differing in length only are
     * different loads */
    if (a->length != b->length) return (a->length > b->length) - (a->length < b->length);
    return b->is_bytes - a->is_bytes; /* a bytes item first: it is scanned */
}

/* One slice of a data file, scanned like a file of its own and named
 * "FILE@OFFSET" (offsets in its findings are relative to the slice). A
 * safetensors file runs to the file's end. */
static int scan_dcp_slice(scanner *sc, const uint8_t *map, size_t size, const dcp_slice *s,
                          int safetensors) {
    const char *member =
        ckpt_arena_printf(&sc->r->arena, "%s@%llu", s->name, (unsigned long long)s->offset);
    if (!member) return CKPT_E_NOMEM;
    if (s->offset > size || s->length > size - s->offset) {
        add_finding(sc, CKPT_SEVERITY_INFO, "dcp-truncated", NULL, member, CKPT_NO_OFFSET,
                    ".metadata places %llu bytes here, past the file's end (%zu bytes)",
                    (unsigned long long)s->length, size);
        sc->unscannable = 1;
        return 0;
    }
    const uint8_t *p = map + s->offset;
    size_t n = safetensors ? size - (size_t)s->offset : (size_t)s->length;
    sc->shard = member;
    sc->content = 0;
    uint64_t budget = sc->budget;
    sc->budget = ckpt_zip_budget(&sc->o.limits, n);
    int rc = scan_file(sc, p, n);
    sc->budget = budget;
    if (rc == 0 && !sc->content) {
        add_finding(sc, CKPT_SEVERITY_INFO, "shard-not-a-checkpoint", NULL, member, 0,
                    "slice holds no pickle, zip archive or safetensors header");
        sc->unscannable = 1;
    }
    sc->shard = NULL;
    sc->content = 1;
    return rc;
}

/* Slices named by DCP metadata, gathered over all the metadata files read. */
typedef struct dcp_slices {
    dcp_slice *items;
    size_t n, cap;
} dcp_slices;

static int scan_dcp_meta_doc(scanner *sc, const uint8_t *p, size_t n, const char *member,
                             const char *file, dcp_slices *out);

/* One DCP metadata pickle, the n bytes at p (`member`: "" for the file
 * scanned, the rank file's name for the other ranks' metadata), read
 * whole (with pread when they are a file's): the pickle itself, read with
 * DCP's metadata classes as data, then the slices it names are added to
 * `out`. */
static int scan_dcp_meta(scanner *sc, const uint8_t *p, size_t n, const char *member,
                         const char *file, dcp_slices *out) {
    ckpt_view v = {0};
    const uint8_t *doc;
    int rc = ckpt_source_view(sc->src, &v, p, n, 0, member, &doc);
    if (rc == 0) rc = scan_dcp_meta_doc(sc, doc, n, member, file, out);
    ckpt_view_free(&v);
    return rc;
}

static int scan_dcp_meta_doc(scanner *sc, const uint8_t *p, size_t n, const char *member,
                             const char *file, dcp_slices *out) {
    region meta = {.p = p, .n = n, .member = member, .dcp_meta = 1};
    int unsafe_before = sc->unsafe;
    sc->unsafe = 0;
    int rc = scan_region(sc, &meta);
    int flagged = sc->unsafe;
    sc->unsafe |= unsafe_before;
    if (rc) return rc;
    sc->content = 1;
    ckpt_dcp_meta m;
    rc = ckpt_dcp_meta_parse(&m, &sc->scratch, p, n, file, &sc->o.limits);
    if (rc == CKPT_E_NOMEM) return rc;
    if (rc) {
        /* an off-list global the pickle scan flagged is its finding; one
         * it allows anywhere else (builtins.dict, collections.OrderedDict
         * as the base or class of copyreg._reconstructor) still leaves
         * the data files unknown, so unscanned */
        if (rc != CKPT_E_UNSAFE || !flagged) {
            add_finding(sc, CKPT_SEVERITY_INFO, "dcp-metadata", NULL, member,
                        in_file(ckpt_error_last()->offset, n), "the data files cannot be found: %s",
                        ckpt_error_last()->message);
            sc->unscannable = 1;
        }
        return 0;
    }
    for (size_t i = 0; i < m.nitems; i++)
        for (size_t c = 0; c < m.items[i].nchunks; c++) {
            const ckpt_dcp_chunk *ch = &m.items[i].chunks[c];
            size_t len = ch->path_len;
            char *canon = ckpt_arena_alloc(&sc->scratch, len + 1);
            if (!canon) return CKPT_E_NOMEM;
            const char *why = ckpt_shard_name(canon, ch->path, len, NULL);
            if (why) {
                add_finding(sc, CKPT_SEVERITY_INFO, "shard-name", NULL, member,
                            in_file(ch->meta_at, n),
                            "data file \"%.200s\" is %s; it is not scanned", ch->path, why);
                sc->unscannable = 1;
                continue;
            }
            if (ckpt_arena_grow(&sc->scratch, (void **)&out->items, &out->cap, out->n + 1,
                                sizeof *out->items))
                return CKPT_E_NOMEM;
            out->items[out->n++] = (dcp_slice){canon, ch->offset, ch->length, m.items[i].is_bytes};
        }
    return 0;
}

/* The ranks' metadata files from rank `first` on: the other ranks' of a
 * save with use_collectives=False (the file scanned is __0.metadata;
 * open/dcp.c reads them all), or every one next to a .metadata, which
 * dcp.load reads (pickle.load) when .metadata is missing or fails to load
 * (a storage_meta it cannot set a load_id on is enough). */
static int scan_dcp_ranks(scanner *sc, dcp_slices *out, int first) {
    DIR *d = opendir(sc->dir);
    if (!d) {
        add_finding(sc, CKPT_SEVERITY_INFO, "dcp-metadata", NULL, "", CKPT_NO_OFFSET,
                    "the directory cannot be listed for the other ranks' metadata");
        sc->unscannable = 1;
        return 0;
    }
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (ckpt_dcp_rank_metadata(e->d_name) < first) continue;
        const char *member = ckpt_arena_strdup(&sc->r->arena, e->d_name);
        const char *path = ckpt_arena_printf(&sc->scratch, "%s/%s", sc->dir, e->d_name);
        if (!member || !path) {
            rc = CKPT_E_NOMEM;
            break;
        }
        ckpt_file *f;
        if (ckpt_file_open_raw(&f, path, NULL)) {
            add_finding(sc, CKPT_SEVERITY_INFO, "shard-unreadable", NULL, member, CKPT_NO_OFFSET,
                        "rank metadata cannot be read: %s", ckpt_error_last()->message);
            sc->unscannable = 1;
            continue;
        }
        uint64_t budget = sc->budget; /* each file has its own */
        const ckpt_source *src = sc->src;
        sc->budget = ckpt_zip_budget(&sc->o.limits, f->map_size);
        sc->src = &f->source;
        rc = scan_dcp_meta(sc, f->map, f->map_size, member, path, out);
        sc->src = src;
        sc->budget = budget;
        ckpt_close(f);
    }
    closedir(d);
    return rc;
}

static int hf_entry(const struct dirent *e) { return ckpt_dcp_hf_name(e->d_name); }

/* HuggingFaceStorageWriter's sharded layout: every "*.safetensors" file,
 * each a shard of its own (HuggingFaceStorageReader reads them all). */
static int scan_dcp_hf(scanner *sc) {
    struct dirent **names = NULL;
    int n = scandir(sc->dir, &names, hf_entry, alphasort), rc = 0;
    sc->content = 1;
    if (n < 0) {
        add_finding(sc, CKPT_SEVERITY_INFO, "dcp-metadata", NULL, "", CKPT_NO_OFFSET,
                    "the directory cannot be listed");
        sc->unscannable = 1;
        return 0;
    }
    for (int i = 0; i < n; i++) {
        if (rc == 0) rc = scan_shard(sc, names[i]->d_name);
        free(names[i]);
    }
    free(names);
    return rc;
}

/* A DCP directory's metadata (FORMATS.md §4; open/dcp.h layouts): the
 * pickle, or with use_collectives=False every rank's, then every slice
 * of a data file they name: tensor chunks (torch.load, weights_only=True)
 * and bytes items (torch.load with weights_only=False in
 * DefaultLoadPlanner: the scan is what stands between them and code
 * execution). Slices not named are never loaded. */
static int scan_dcp(scanner *sc, const uint8_t *p, size_t n) {
    if (sc->dcp == DCP_HF) return scan_dcp_hf(sc);
    if (sc->dcp == DCP_NO_METADATA || sc->dcp == DCP_NO_RANK0) {
        add_finding(sc, CKPT_SEVERITY_INFO, "dcp-metadata", NULL, "", CKPT_NO_OFFSET,
                    sc->dcp == DCP_NO_RANK0
                        ? "missing: the directory holds rank metadata files (a save with "
                          "use_collectives=False) but not rank 0's, which dcp.load without a "
                          "process group reads"
                        : "missing: the directory holds DCP data files (*.distcp) but no "
                          ".metadata, so which slices a loader reads is not known");
        sc->content = 1;
        sc->unscannable = 1;
        return 0;
    }
    dcp_slices all = {0};
    int rc = scan_dcp_meta(sc, p, n, "", sc->file, &all);
    if (rc) return rc;
    if (!sc->dir) {
        add_finding(sc, CKPT_SEVERITY_INFO, "dcp-metadata", NULL, "", 0,
                    "DCP metadata: its data files, which are not scanned from a buffer, are next "
                    "to it (scan the directory)");
        return 0;
    }
    if ((rc = scan_dcp_ranks(sc, &all, sc->dcp == DCP_RANKS))) return rc;
    dcp_slice *sl = all.items;
    size_t ns = all.n;
    if (ns > 1) qsort(sl, ns, sizeof *sl, by_slice);
    /* each data file is read with pread (its source), never through its
     * mapping, and must not shrink while its slices are scanned */
    const ckpt_source *src = sc->src;
    ckpt_file *df = NULL;
    ckpt_view hv = {0}, sv = {0}; /* the heads of the data file and of a slice */
    const uint8_t *map = NULL, *h0 = NULL;
    size_t size = 0, n0 = 0;
    uint64_t scanned = 0; /* bytes of the current data file scanned so far */
    for (size_t i = 0; rc == 0 && i < ns; i++) {
        if (i > 0 && !strcmp(sl[i].name, sl[i - 1].name) && sl[i].offset == sl[i - 1].offset &&
            sl[i].length == sl[i - 1].length)
            continue; /* the same load (a bytes item's, sorted first, is scanned) */
        if (i == 0 || strcmp(sl[i].name, sl[i - 1].name)) {
            if (df && (rc = ckpt_source_check_size(&df->source))) break;
            ckpt_close(df);
            df = NULL;
            sc->src = src;
            map = NULL;
            size = 0;
            scanned = 0;
            const char *path = ckpt_arena_printf(&sc->scratch, "%s/%s", sc->dir, sl[i].name);
            const char *name = path ? ckpt_arena_strdup(&sc->r->arena, sl[i].name) : NULL;
            if (!name) {
                rc = CKPT_E_NOMEM;
                break;
            }
            note_link(sc, name, path, "data file", "DCP directory");
            if (ckpt_file_open_raw(&df, path, NULL)) {
                add_finding(sc, CKPT_SEVERITY_INFO, "shard-unreadable", NULL, name, CKPT_NO_OFFSET,
                            "data file cannot be read: %s", ckpt_error_last()->message);
                sc->unscannable = 1;
                while (i + 1 < ns && !strcmp(sl[i + 1].name, sl[i].name)) i++;
                continue;
            }
            map = df->map;
            size = df->map_size;
            sc->src = &df->source;
            n0 = size < CKPT_HEAD_BYTES ? size : CKPT_HEAD_BYTES;
            if ((rc = ckpt_source_view(sc->src, &hv, map, n0, 0, NULL, &h0))) break;
        }
        /* the reader's rule (open/dcp.h): a tensor chunk inside the data
         * of the safetensors file the whole data file is (ckpt.dcp.Writer)
         * is raw tensor data that no loader unpickles; the zips of bytes
         * items in that file are scanned at their own slices */
        const dcp_slice *at = &sl[i];
        uint64_t base = at->offset;
        ckpt_format fmt = CKPT_FORMAT_UNKNOWN;
        size_t left = 0;
        if (map && at->offset <= size) {
            left = size - (size_t)at->offset;
            size_t nat = left < CKPT_HEAD_BYTES ? left : CKPT_HEAD_BYTES;
            const uint8_t *h;
            if ((rc = ckpt_source_view(sc->src, &sv, map + at->offset, nat, 0, NULL, &h))) break;
            fmt = ckpt_dcp_slice_format(h0, n0, h, nat, at->offset, at->is_bytes, &base);
        }
        if (base != at->offset) continue;
        /* DCP writes disjoint slices; overlapping ones (many slices over
         * one span) would make the scan cost slices x file size */
        uint64_t span = fmt == CKPT_FORMAT_SAFETENSORS ? left
                        : at->length < left            ? at->length
                                                       : left;
        if (scanned + span > 2 * (uint64_t)size + DCP_SCAN_SLACK) {
            const char *name = ckpt_arena_strdup(&sc->r->arena, at->name);
            if (!name) {
                rc = CKPT_E_NOMEM;
                break;
            }
            add_finding(sc, CKPT_SEVERITY_INFO, "dcp-overlap", NULL, name, at->offset,
                        ".metadata's slices of this data file overlap past twice its size; "
                        "the slices from here on are not scanned");
            sc->unscannable = 1;
            while (i + 1 < ns && !strcmp(sl[i + 1].name, sl[i].name)) i++;
            continue;
        }
        scanned += span;
        rc = scan_dcp_slice(sc, map, size, at, fmt == CKPT_FORMAT_SAFETENSORS);
    }
    if (rc == 0 && df) rc = ckpt_source_check_size(&df->source);
    sc->src = src;
    ckpt_view_free(&hv);
    ckpt_view_free(&sv);
    ckpt_close(df);
    return rc;
}

/* ------------------------------------------------------------ the file */

/* ckpt_detect_format over the whole file, from its head h[0..hn): they
 * differ only where the head is JSON whitespace and the file goes on,
 * an index when its text then starts with '{'. */
static int detect(scanner *sc, const uint8_t *p, size_t n, const uint8_t *h, size_t hn,
                  ckpt_format *fmt) {
    *fmt = ckpt_detect_format(h, hn);
    int c = 0, rc = 0;
    ckpt_view v = {0};
    if (hn < n && *fmt == CKPT_FORMAT_UNKNOWN &&
        (rc = ckpt_scan_first_non_ws(NULL, &v, h, 0, hn, &c)) == 0 && c < 0 &&
        (rc = ckpt_scan_first_non_ws(sc->src, &v, p, hn, n, &c)) == 0 && c == '{')
        *fmt = CKPT_FORMAT_SAFETENSORS_SHARDED;
    ckpt_view_free(&v);
    return rc;
}

/* scan_file with the file's head h[0..hn) (its first CKPT_HEAD_BYTES, or
 * all of it). */
static int scan_head(scanner *sc, const uint8_t *p, size_t n, const uint8_t *h, size_t hn) {
    region top = {.p = p, .n = n, .member = file_member(sc), .top = 1};
    ckpt_format fmt;
    int rc, seen;
    if ((rc = detect(sc, p, n, h, hn, &fmt))) return rc;
    sc->legacy_head = fmt == CKPT_FORMAT_TORCH_LEGACY;
    if (!sc->shard && (sc->dcp || fmt == CKPT_FORMAT_DCP)) return scan_dcp(sc, p, n);
    if (n == 0) return 0;
    if (fmt == CKPT_FORMAT_SAFETENSORS_SHARDED) return scan_index(sc, p, n);
    const char *foreign = ckpt_scan_foreign_container(h, hn);
    if (foreign) {
        add_finding(sc, CKPT_SEVERITY_INFO, "unsupported-container", NULL, file_member(sc), 0,
                    "%s: its content cannot be examined", foreign);
        sc->unscannable = 1;
        /* the magic may also open a pickle stream: a loader that does not
         * look at magic numbers would run it */
        top.sniffed = 1;
        top.top = 0;
        return ckpt_scan_pickle_start(h, hn) ? scan_region(sc, &top) : 0;
    }
    /* torch.load takes a file starting with PK\3\4 for a zip and reads it
     * with miniz; np.load (for .npz) and other tools read it with Python's
     * zipfile, which also finds an archive behind a prefix. Every member
     * of either reading is scanned. */
    int zip_start = hn >= 4 && memcmp(h, "PK\3\4", 4) == 0;
    if ((rc = scan_zip_readings(sc, p, n, zip_start, &seen))) return rc;
    if (zip_start && !seen) {
        sc->unscannable = 1;
        return 0;
    }
    if (zip_start) return 0;
    if ((rc = scan_tar(sc, p, n))) return rc;
    ckpt_view v = {0};
    int st = 0;
    rc = scan_npy(sc, &top, &v, &seen);
    if (rc == 0 && !seen) rc = ckpt_scan_looks_safetensors_at(sc->src, &v, p, n, &st);
    ckpt_view_free(&v);
    if (rc || seen) return rc;
    if (st) {
        if (sc->header_checked)
            sc->content = 1;
        else if ((rc = scan_safetensors(sc, p, n)))
            return rc;
        top.sniffed = 1;
        top.top = 0;
    }
    if (!ckpt_scan_pickle_start(h, hn)) return 0;
    return scan_region(sc, &top);
}

/* The file (or a shard, a slice) p[0..n): p is an address in sc->src's
 * mapping (read with pread) or memory. */
static int scan_file(scanner *sc, const uint8_t *p, size_t n) {
    ckpt_view v = {0};
    const uint8_t *h;
    size_t hn = n < CKPT_HEAD_BYTES ? n : CKPT_HEAD_BYTES;
    int rc = ckpt_source_view(sc->src, &v, p, hn, 0, file_member(sc), &h);
    if (rc == 0) rc = scan_head(sc, p, n, h, hn);
    ckpt_view_free(&v);
    return rc;
}

/* ------------------------------------------------------------ report */

typedef struct ordered {
    ckpt_finding f;
    size_t seq;
} ordered;

static int cmp_ordered(const void *a, const void *b) {
    const ordered *x = a, *y = b;
    if (x->f.offset != y->f.offset) return x->f.offset < y->f.offset ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Verdict, repeat counts in messages, file order, sorted globals. */
static int finish(scanner *sc) {
    ckpt_scan_report *r = sc->r;
    if (!sc->unsafe && !sc->unscannable && !sc->content)
        add_finding(sc, CKPT_SEVERITY_INFO, "no-content", NULL, "", 0,
                    "no pickle, zip archive or safetensors header found");
    if (sc->nomem) return CKPT_E_NOMEM;
    r->verdict = sc->unsafe        ? CKPT_VERDICT_UNSAFE
                 : sc->unscannable ? CKPT_VERDICT_UNSCANNABLE
                 : sc->review      ? CKPT_VERDICT_REVIEW
                 : sc->content     ? CKPT_VERDICT_SAFE
                                   : CKPT_VERDICT_NOT_A_CHECKPOINT;
    ordered *o = ckpt_arena_array(&sc->scratch, r->nfindings + 1, sizeof *o);
    if (!o) return CKPT_E_NOMEM;
    for (size_t i = 0; i < r->nfindings; i++) {
        o[i].f = r->findings[i];
        o[i].seq = i;
        if (r->repeats[i]) {
            o[i].f.message =
                ckpt_arena_printf(&r->arena, "%s (seen %llu times)", r->findings[i].message,
                                  (unsigned long long)r->repeats[i] + 1);
            if (!o[i].f.message) return CKPT_E_NOMEM;
        }
    }
    if (r->nfindings > 1) qsort(o, r->nfindings, sizeof *o, cmp_ordered);
    for (size_t i = 0; i < r->nfindings; i++) r->findings[i] = o[i].f;
    if (sc->dropped) {
        /* past the cap, appended last whatever its offset */
        const char *m =
            ckpt_arena_printf(&r->arena, "%llu more distinct findings were not recorded",
                              (unsigned long long)sc->dropped);
        if (!m || ckpt_arena_grow(&r->arena, (void **)&r->findings, &r->findcap, r->nfindings + 1,
                                  sizeof *r->findings))
            return CKPT_E_NOMEM;
        r->findings[r->nfindings++] =
            (ckpt_finding){CKPT_SEVERITY_INFO, "truncated", NULL, "", CKPT_NO_OFFSET, m};
    }
    if (r->nglobals > 1) qsort(r->globals, r->nglobals, sizeof *r->globals, cmp_str);
    return 0;
}

/* An entry of the caller's allowlist that names a dangerous family is
 * never honoured (intern_global): say so, once per name. */
static int report_refused_allows(scanner *sc) {
    for (size_t i = 0; i < sc->o.nallow; i++) {
        const char *full = sc->allow[i], *dot = strchr(full, '.'), *why;
        if (i > 0 && strcmp(full, sc->allow[i - 1]) == 0) continue;
        char *module =
            ckpt_arena_strndup(&sc->scratch, full, dot ? (size_t)(dot - full) : strlen(full));
        if (!module) return CKPT_E_NOMEM;
        if (ckpt_scan_classify(module, dot ? dot + 1 : "", &why) != CKPT_SEVERITY_DANGEROUS)
            continue;
        /* not interned: the file does not name it */
        const char *g = ckpt_arena_strdup(&sc->r->arena, full);
        if (!g) return CKPT_E_NOMEM;
        add_finding(sc, CKPT_SEVERITY_INFO, "allow-ignored", g, "", CKPT_NO_OFFSET,
                    "--allow %s ignored: %s cannot be allowlisted", full, why);
    }
    return sc->nomem ? CKPT_E_NOMEM : 0;
}

/* ckpt_scan_memory, with the directory of a file scanned from a path (for
 * the shards of a sharded index) or NULL. */
static int scan_buffer(ckpt_scan_report **out, const void *data, size_t size, const char *name,
                       const char *dir, const ckpt_scan_options *opts, const ckpt_file *opened,
                       int dcp, const ckpt_source *src) {
    const char *file = name ? name : "";
    if (!out) return ckpt_err(CKPT_E_INVALID_ARG, file, NULL, CKPT_NO_OFFSET, "out is NULL");
    *out = NULL;
    if (!data && size)
        return ckpt_err(CKPT_E_INVALID_ARG, file, NULL, CKPT_NO_OFFSET, "data is NULL");
    CKPT_CHECK_OPTIONS(opts, CKPT_SCAN_OPTIONS_VERSION);
    scanner sc = {0};
    ckpt_scan_options defaults = CKPT_SCAN_OPTIONS_INIT;
    sc.o = opts ? *opts : defaults;
    if (sc.o.nallow && !sc.o.allow)
        return ckpt_err(CKPT_E_INVALID_ARG, file, NULL, CKPT_NO_OFFSET,
                        "allow is NULL with nallow = %zu", sc.o.nallow);
    for (size_t i = 0; i < sc.o.nallow; i++)
        if (!sc.o.allow[i])
            return ckpt_err(CKPT_E_INVALID_ARG, file, NULL, CKPT_NO_OFFSET, "allow[%zu] is NULL",
                            i);
    sc.budget = ckpt_zip_budget(&sc.o.limits, size);
    sc.dir = dir;
    sc.header_checked = opened && opened->format == CKPT_FORMAT_SAFETENSORS;
    sc.opened = opened && opened->format == CKPT_FORMAT_TORCH_ZIP ? opened->zip : NULL;
    sc.log = sc.opened ? opened->pickle_log : NULL;
    sc.dcp = dcp;
    sc.src = src;
    sc.seed = 1469598103934665603u ^ ((uint64_t)(uintptr_t)&sc * 0x9e3779b97f4a7c15u);
    sc.r = ckpt_malloc(sizeof *sc.r);
    if (!sc.r) return ckpt_err(CKPT_E_NOMEM, file, NULL, CKPT_NO_OFFSET, "out of memory");
    memset(sc.r, 0, sizeof *sc.r);
    sc.r->wo.offset = CKPT_NO_OFFSET;
    int rc = 0;
    sc.file = ckpt_arena_strdup(&sc.r->arena, file);
    sc.allow = ckpt_arena_array(&sc.scratch, sc.o.nallow + 1, sizeof *sc.allow);
    if (!sc.file || !sc.allow) {
        rc = CKPT_E_NOMEM;
    } else {
        if (sc.o.nallow) memcpy(sc.allow, sc.o.allow, sc.o.nallow * sizeof *sc.allow);
        if (sc.o.nallow > 1) qsort(sc.allow, sc.o.nallow, sizeof *sc.allow, cmp_str);
        rc = report_refused_allows(&sc);
        if (rc == 0) rc = scan_file(&sc, data ? data : (const void *)"", size);
        if (rc == 0 && sc.nomem) rc = CKPT_E_NOMEM;
        /* an answer from a file that shrank while it was read is no
         * answer (what a reader swallowed as a finding, too) */
        if (rc == 0) rc = ckpt_source_check_size(src);
        if (rc == 0) rc = finish(&sc);
    }
    ckpt_arena_free(&sc.scratch);
    if (rc) {
        ckpt_scan_report_free(sc.r);
        if (rc != CKPT_E_NOMEM) return rc; /* a read failed: recorded */
        return ckpt_err(CKPT_E_NOMEM, file, NULL, CKPT_NO_OFFSET, "out of memory while scanning");
    }
    ckpt_err_clear(); /* parse errors were findings, not failures */
    *out = sc.r;
    return 0;
}

int ckpt_scan_memory(ckpt_scan_report **out, const void *data, size_t size, const char *name,
                     const ckpt_scan_options *opts) {
    return scan_buffer(out, data, size, name, NULL, opts, NULL, 0, NULL);
}

/* A DCP directory (open/dcp.h layouts): the metadata its loader reads,
 * as DCP metadata whatever its content (.metadata, or __0.metadata and
 * the other ranks'), and the data files named; or, in
 * HuggingFaceStorageWriter's sharded layout, its safetensors files. */
static int scan_dcp_dir(ckpt_scan_report **out, const char *dir, const ckpt_scan_options *opts) {
    ckpt_dcp_layout layout = ckpt_dcp_dir_layout(dir);
    const char *name = layout == CKPT_DCP_RANKS ? "/__0.metadata" : "/.metadata";
    size_t dlen = strlen(dir), nlen = strlen(name);
    char *meta = ckpt_malloc(dlen + nlen + 1);
    if (!meta) return ckpt_err(CKPT_E_NOMEM, dir, NULL, CKPT_NO_OFFSET, "out of memory");
    memcpy(meta, dir, dlen);
    memcpy(meta + dlen, name, nlen + 1);
    ckpt_file *f;
    struct stat st;
    int rc = 0;
    if (layout == CKPT_DCP_HF) {
        rc = scan_buffer(out, NULL, 0, dir, dir, opts, NULL, DCP_HF, NULL);
    } else if (stat(meta, &st) != 0 && errno == ENOENT) {
        rc = scan_buffer(out, NULL, 0, meta, dir, opts, NULL,
                         layout == CKPT_DCP_RANKS ? DCP_NO_RANK0 : DCP_NO_METADATA, NULL);
    } else if ((rc = ckpt_file_open_raw(&f, meta, NULL)) == 0) {
        rc = scan_buffer(out, f->map, f->map_size, meta, dir, opts, NULL,
                         layout == CKPT_DCP_RANKS ? DCP_RANKS : 1, &f->source);
        ckpt_close(f);
    }
    ckpt_free(meta);
    return rc;
}

int ckpt_scan(ckpt_scan_report **out, const char *path, const ckpt_scan_options *opts) {
    if (!out) return ckpt_err(CKPT_E_INVALID_ARG, path, NULL, CKPT_NO_OFFSET, "out is NULL");
    *out = NULL;
    if (!path) return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET, "path is NULL");
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode) && ckpt_dcp_is_dir(path))
        return scan_dcp_dir(out, path, opts);
    /* read with pread, never through the mapping (base/source.h) */
    ckpt_file *f;
    int rc = ckpt_file_open_raw(&f, path, NULL);
    if (rc) return rc;
    /* the shards of an index are found next to it */
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + (slash == path) : 1;
    char *dir = ckpt_malloc(dlen + 1);
    if (!dir) {
        rc = ckpt_err(CKPT_E_NOMEM, path, NULL, CKPT_NO_OFFSET, "out of memory");
    } else {
        memcpy(dir, slash ? path : ".", dlen);
        dir[dlen] = '\0';
        rc = scan_buffer(out, f->map, f->map_size, path, dir, opts, NULL, 0, &f->source);
    }
    ckpt_free(dir);
    ckpt_close(f);
    return rc;
}

int ckpt_scan_file(ckpt_scan_report **out, const ckpt_file *f, const ckpt_scan_options *opts) {
    if (!out) return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET, "out is NULL");
    *out = NULL;
    if (!f) return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET, "f is NULL");
    /* an index's shards are found next to it: scanned from its path */
    if (f->format == CKPT_FORMAT_SAFETENSORS_SHARDED || f->format == CKPT_FORMAT_TORCH_SHARDED)
        return ckpt_scan(out, f->path, opts);
    return ckpt_scan_opened(out, f, opts);
}

int ckpt_scan_opened(ckpt_scan_report **out, const ckpt_file *f, const ckpt_scan_options *opts) {
    if (f->format == CKPT_FORMAT_DCP) return ckpt_scan(out, f->dcp_dir, opts);
    return scan_buffer(out, f->map, f->map_size, f->path, NULL, opts, f, 0, &f->source);
}

int ckpt_scan_path_or_opened(ckpt_scan_report **out, const char *path, const ckpt_file *opened,
                             const ckpt_scan_options *opts) {
    if (opened && strcmp(path, opened->path) == 0 &&
        (opened->format == CKPT_FORMAT_SAFETENSORS || opened->format == CKPT_FORMAT_TORCH_ZIP))
        return ckpt_scan_opened(out, opened, opts);
    return ckpt_scan(out, path, opts);
}

void ckpt_scan_report_free(ckpt_scan_report *r) {
    if (!r) return;
    ckpt_arena_free(&r->arena);
    ckpt_free(r);
}

/* A report that does not exist is never safe. */
ckpt_verdict ckpt_scan_verdict(const ckpt_scan_report *r) {
    return r ? r->verdict : CKPT_VERDICT_UNSCANNABLE;
}

const char *ckpt_verdict_name(ckpt_verdict v) {
    switch (v) {
    case CKPT_VERDICT_SAFE: return "safe";
    case CKPT_VERDICT_UNSAFE: return "unsafe";
    case CKPT_VERDICT_UNSCANNABLE: return "unscannable";
    case CKPT_VERDICT_NOT_A_CHECKPOINT: return "not-a-checkpoint";
    case CKPT_VERDICT_REVIEW: return "review";
    }
    return "unknown";
}

const char *ckpt_severity_name(ckpt_severity s) {
    switch (s) {
    case CKPT_SEVERITY_INFO: return "info";
    case CKPT_SEVERITY_SUSPICIOUS: return "suspicious";
    case CKPT_SEVERITY_DANGEROUS: return "dangerous";
    }
    return "unknown";
}

size_t ckpt_scan_finding_count(const ckpt_scan_report *r) { return r ? r->nfindings : 0; }

const ckpt_finding *ckpt_scan_finding(const ckpt_scan_report *r, size_t i) {
    return r && i < r->nfindings ? &r->findings[i] : NULL;
}

int ckpt_scan_weights_only(const ckpt_scan_report *r, ckpt_weights_only *out) {
    static const ckpt_weights_only none = {0, NULL, NULL, "", CKPT_NO_OFFSET, NULL};
    *out = r && r->wo.refused && r->verdict != CKPT_VERDICT_UNSCANNABLE &&
                   r->verdict != CKPT_VERDICT_NOT_A_CHECKPOINT
               ? r->wo
               : none;
    return out->refused;
}

size_t ckpt_scan_global_count(const ckpt_scan_report *r) { return r ? r->nglobals : 0; }

const char *ckpt_scan_global(const ckpt_scan_report *r, size_t i) {
    return r && i < r->nglobals ? r->globals[i] : NULL;
}

size_t ckpt_scan_shard_count(const ckpt_scan_report *r) { return r ? r->nshards : 0; }

const char *ckpt_scan_shard(const ckpt_scan_report *r, size_t i) {
    return r && i < r->nshards ? r->shards[i] : NULL;
}
