/* test_match.c - manifests, ckpt_match (exact names, prefix inference,
 * training checkpoints, allowed exceptions, warnings, tied weights),
 * ckpt_diff on tensors and non-tensor values built in memory, on the
 * logical tree of ckpt-written safetensors, and with key rewrites,
 * allocation failures, and two normalisation properties: for random key
 * sets under random stacked wrapper prefixes, --normalize either restores
 * exactly the original keys or applies nothing; for random training
 * checkpoints it selects exactly the model entry. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "acct.h"
#include "fail_alloc.h"
#include "harness.h"
#include "base/strmap.h"
#include "keys/keys.h"

/* ------------------------------------------------------------ helpers */

/* A manifest of `names` (NULL-terminated), F32, shape [i + 1] for name i,
 * so that pairing the wrong keys shows up as a shape mismatch. */
static ckpt_manifest *manifest_of(const char *const *names) {
    ckpt_manifest *m = NULL;
    CHECK_EQ_INT(ckpt_manifest_new(&m, "test"), 0);
    for (uint64_t i = 0; m && names[i]; i++) {
        uint64_t dim = i + 1;
        CHECK_EQ_INT(ckpt_manifest_add(m, names[i], "F32", 1, &dim), 0);
    }
    return m;
}

/* The manifests of the last match(), freed by done(). */
static ckpt_manifest *cur_c, *cur_e;

static ckpt_match_result *match(const char *const *c, const char *const *e,
                                const ckpt_match_options *o) {
    ckpt_match_result *r = NULL;
    cur_c = manifest_of(c);
    cur_e = manifest_of(e);
    CHECK_EQ_INT(ckpt_match(&r, cur_c, cur_e, o), 0);
    return r;
}

static void done(ckpt_match_result *r) {
    ckpt_match_result_free(r);
    ckpt_manifest_free(cur_c);
    ckpt_manifest_free(cur_e);
    cur_c = cur_e = NULL;
}

/* "a,b,c" of a list's names. */
static const char *names(const ckpt_match_result *r, ckpt_match_list l) {
    static char buf[4096];
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < ckpt_match_count(r, l); i++)
        used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s", i ? "," : "",
                                 ckpt_match_item_at(r, l, i)->name);
    return buf;
}

static const char *rewrite_desc(const ckpt_match_result *r) {
    const ckpt_rewrite *rw = ckpt_match_rewrite(r);
    return rw ? rw->description : "(none)";
}

/* ------------------------------------------------------------ manifests */

TEST(manifest_add_find) {
    ckpt_manifest *m = NULL;
    uint64_t shape[2] = {3, 4};
    CHECK_EQ_INT(ckpt_manifest_new(&m, "m"), 0);
    CHECK_EQ_INT(ckpt_manifest_add(m, "a.weight", "F32", 2, shape), 0);
    CHECK_EQ_INT(ckpt_manifest_add(m, "a.bias", "BF16", 0, NULL), 0);
    CHECK_EQ_INT(ckpt_manifest_add(m, "a.weight", "F16", 0, NULL), CKPT_E_INVALID_ARG);
    CHECK(strstr(ckpt_error_last()->message, "duplicate key 'a.weight'") != NULL);
    CHECK_EQ_INT(ckpt_manifest_add(m, "x", "F32", CKPT_MAX_NDIM + 1, shape), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_manifest_count(m), 2);
    const ckpt_manifest_entry *e = ckpt_manifest_find(m, "a.weight");
    CHECK(e && e->ndim == 2 && e->shape[1] == 4 && strcmp(e->dtype, "F32") == 0);
    CHECK(ckpt_manifest_find(m, "a") == NULL);
    CHECK(ckpt_manifest_find(m, "a.weight.x") == NULL);
    CHECK(ckpt_manifest_entry_at(m, 1) == ckpt_manifest_find(m, "a.bias"));
    CHECK(ckpt_manifest_entry_at(m, 2) == NULL);
    CHECK(ckpt_manifest_file(m) == NULL);
    ckpt_manifest_free(m);
    ckpt_manifest_free(NULL);
}

/* Many keys: the index grows and every key stays findable. */
TEST(manifest_many) {
    ckpt_manifest *m = NULL;
    char name[32];
    CHECK_EQ_INT(ckpt_manifest_new(&m, "m"), 0);
    for (int i = 0; i < 20000; i++) {
        snprintf(name, sizeof name, "layers.%d.w", i);
        CHECK_EQ_INT(ckpt_manifest_add(m, name, "F32", 0, NULL), 0);
    }
    int found = 0;
    for (int i = 0; i < 20000; i++) {
        snprintf(name, sizeof name, "layers.%d.w", i);
        const ckpt_manifest_entry *e = ckpt_manifest_find(m, name);
        found += e && strcmp(e->name, name) == 0;
    }
    CHECK_EQ_INT(found, 20000);
    ckpt_manifest_free(m);
}

static int parse(const char *json, ckpt_manifest **m) {
    return ckpt_manifest_parse(m, json, strlen(json), "spec.json", NULL);
}

TEST(manifest_json) {
    ckpt_manifest *m = NULL;
    CHECK_EQ_INT(parse("{\"file\":\"x\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\","
                       "\"shape\":[2,3],\"nbytes\":24},{\"name\":\"\",\"dtype\":\"I64\","
                       "\"shape\":[]}],\"values\":[],\"metadata\":{\"b\":\"a\",\"n\":1}}",
                       &m),
                 0);
    CHECK_EQ_INT(ckpt_manifest_count(m), 2);
    CHECK(ckpt_manifest_find(m, "a")->shape[1] == 3);
    CHECK_EQ_STR(ckpt_manifest_find(m, "")->dtype, "I64");
    CHECK_EQ_INT(m->nmeta, 1); /* the int value is no alias */
    ckpt_manifest_free(m);
    /* no ties (null, []) and ties: read alike */
    CHECK_EQ_INT(
        parse("{\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[]}],\"ties\":[]}", &m),
        0);
    CHECK_EQ_INT(ckpt_manifest_count(m), 1);
    ckpt_manifest_free(m);
    CHECK_EQ_INT(parse("{\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[]},{\"name\":"
                       "\"b\",\"dtype\":\"F32\",\"shape\":[]}],\"ties\":[[\"a\",\"b\"]]}",
                       &m),
                 0);
    CHECK_EQ_INT(ckpt_manifest_tie_root(m, 0), ckpt_manifest_tie_root(m, 1));
    ckpt_manifest_free(m);
    /* ties before the tensors they name, groups of three, an escaped name
     * (the one-pass reader reads the rest, the tree the escaped one): the
     * same forest */
    const char *ties[] = {"[[\"c\",\"a\",\"b\"],[]]", "[[\"c\",\"\\u0061\",\"b\"],[]]"};
    for (int k = 0; k < 2; k++) {
        char doc[512];
        snprintf(doc, sizeof doc,
                 "{\"ties\":%s,\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[2]},"
                 "{\"name\":\"b\",\"dtype\":\"F32\",\"shape\":[2]},{\"name\":\"c\","
                 "\"dtype\":\"F32\",\"shape\":[2]},{\"name\":\"d\",\"dtype\":\"F32\","
                 "\"shape\":[2]}]}",
                 ties[k]);
        CHECK_EQ_INT(parse(doc, &m), 0);
        if (!m) continue;
        size_t a = ckpt_manifest_lookup(m, "a", 1), b = ckpt_manifest_lookup(m, "b", 1),
               c = ckpt_manifest_lookup(m, "c", 1), d = ckpt_manifest_lookup(m, "d", 1);
        CHECK_EQ_INT(ckpt_manifest_tie_root(m, a), ckpt_manifest_tie_root(m, c));
        CHECK_EQ_INT(ckpt_manifest_tie_root(m, b), ckpt_manifest_tie_root(m, c));
        CHECK(ckpt_manifest_tie_root(m, d) != ckpt_manifest_tie_root(m, a));
        ckpt_manifest_free(m);
    }
    /* escapes, reals, nested values and unknown fields read as written */
    CHECK_EQ_INT(parse("{\"tensors\":[{\"name\":\"w\\u00e9\\n\",\"dtype\":\"BF16\","
                       "\"shape\":[0,7],\"x\":{\"y\":[-1.5e3,true,null]}}],\"values\":[{"
                       "\"name\":\"lr\",\"value\":0.001}],\"metadata\":{\"k\\\"\":\"v\\t\"}}",
                       &m),
                 0);
    CHECK_EQ_INT(ckpt_manifest_count(m), 1);
    CHECK(ckpt_manifest_find(m, "w\xc3\xa9\n") && ckpt_manifest_find(m, "w\xc3\xa9\n")->ndim == 2);
    CHECK_EQ_INT(ckpt_manifest_find(m, "w\xc3\xa9\n")->shape[1], 7);
    CHECK_EQ_INT(m->nmeta, 1);
    CHECK_EQ_STR(m->meta_keys[0], "k\"");
    CHECK_EQ_STR(m->meta_vals[0], "v\t");
    ckpt_manifest_free(m);

    static const struct {
        const char *json;
        int code;
        const char *msg;
    } bad[] = {
        {"[1]", CKPT_E_FORMAT, "not a manifest"},
        {"{\"tensors\":{}}", CKPT_E_FORMAT, "not a manifest"},
        {"{\"tensors\":[1]}", CKPT_E_FORMAT, "tensors[0]: expected an object"},
        {"{\"tensors\":[{\"name\":1,\"dtype\":\"F32\",\"shape\":[]}]}", CKPT_E_FORMAT,
         "tensors[0]: expected \"name\""},
        {"{\"tensors\":[{\"name\":\"a\\u0000b\",\"dtype\":\"F32\",\"shape\":[]}]}", CKPT_E_FORMAT,
         "not valid JSON"},
        {"{\"tensors\":[{\"name\":\"a\",\"shape\":[]}]}", CKPT_E_FORMAT, "\"dtype\""},
        {"{\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[-1]}]}", CKPT_E_FORMAT,
         "non-negative"},
        {"{\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[1.5]}]}", CKPT_E_FORMAT,
         "non-negative"},
        {"{\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[]},"
         "{\"name\":\"a\",\"dtype\":\"F16\",\"shape\":[]}]}",
         CKPT_E_FORMAT, "tensors[1]: duplicate name 'a'"},
        {"{\"tensors\":[],\"tensors\":[]}", CKPT_E_FORMAT, "not valid JSON"},
        {"{\"tensors\":[]", CKPT_E_FORMAT, "not valid JSON"},
        {"{\"tensors\":[],\"metadata\":[]}", CKPT_E_FORMAT, "\"metadata\""},
        /* what the one-pass reader leaves to jansson, refused the same */
        {"{\"tensors\":[],\"values\":[{\"v\":1,\"v\":2}]}", CKPT_E_FORMAT, "not valid JSON"},
        {"{\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[],\"shape\":[]}]}",
         CKPT_E_FORMAT, "not valid JSON"},
        {"{\"tensors\":[],\"values\":[1e400]}", CKPT_E_FORMAT, "not valid JSON"},
        {"{\"tensors\":[],\"values\":[9223372036854775808]}", CKPT_E_FORMAT, "not valid JSON"},
        {"{\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[9223372036854775808]}]}",
         CKPT_E_FORMAT, "not valid JSON"},
        {"{\"tensors\":[]} x", CKPT_E_FORMAT, "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        m = (ckpt_manifest *)1;
        CHECK_EQ_INT(parse(bad[i].json, &m), bad[i].code);
        CHECK(m == NULL);
        if (!strstr(ckpt_error_last()->message, bad[i].msg))
            fprintf(stderr, "case %zu: message '%s' lacks '%s'\n", i, ckpt_error_last()->message,
                    bad[i].msg);
        CHECK(strstr(ckpt_error_last()->message, bad[i].msg) != NULL);
        CHECK_EQ_STR(ckpt_error_last()->file, "spec.json");
    }

    /* limits */
    ckpt_limits lim = CKPT_LIMITS_INIT;
    const char *two = "{\"tensors\":[{\"name\":\"abc\",\"dtype\":\"F32\",\"shape\":[1,2]},"
                      "{\"name\":\"d\",\"dtype\":\"F32\",\"shape\":[]}]}";
    lim.max_tensors = 1;
    CHECK_EQ_INT(ckpt_manifest_parse(&m, two, strlen(two), "s", &lim), CKPT_E_LIMIT);
    lim = (ckpt_limits)CKPT_LIMITS_INIT;
    lim.max_name_bytes = 2;
    CHECK_EQ_INT(ckpt_manifest_parse(&m, two, strlen(two), "s", &lim), CKPT_E_LIMIT);
    lim = (ckpt_limits)CKPT_LIMITS_INIT;
    lim.max_ndim = 1;
    CHECK_EQ_INT(ckpt_manifest_parse(&m, two, strlen(two), "s", &lim), CKPT_E_LIMIT);
    lim = (ckpt_limits)CKPT_LIMITS_INIT;
    lim.max_index_bytes = 10;
    CHECK_EQ_INT(ckpt_manifest_parse(&m, two, strlen(two), "s", &lim), CKPT_E_LIMIT);
}

/* ------------------------------------------------------------ segments */

TEST(segments) {
    CHECK_EQ_INT(ckpt_key_aligned("a.bc.d", 6, 2, 3), 1); /* "bc." */
    CHECK_EQ_INT(ckpt_key_aligned("a.bc.d", 6, 2, 2), 1); /* "bc" */
    CHECK_EQ_INT(ckpt_key_aligned("a.bc.d", 6, 2, 1), 0); /* "b" */
    CHECK_EQ_INT(ckpt_key_aligned("a.bc.d", 6, 3, 2), 0); /* "c." */
    CHECK_EQ_INT(ckpt_key_aligned("a.bc.d", 6, 5, 1), 1); /* "d" */
    CHECK_EQ_INT(ckpt_key_aligned("a.bc.d", 6, 5, 2), 0); /* past the end */

    char out[128];
    const char *k = "_orig_mod.enc._fsdp_wrapped_module.layer._checkpoint_wrapped_module.w";
    CHECK_EQ_INT(ckpt_key_wrappers(k, strlen(k)), 7);
    ckpt_key_drop_wrappers(k, strlen(k), out);
    CHECK_EQ_STR(out, "enc.layer.w");
    /* a wrapper name as the last segment, inside a segment, or without
     * its underscore is an ordinary name */
    const char *plain[] = {"a._orig_mod", "a.x_orig_mod.b", "orig_mod.b", "a._orig_modx.b",
                           "encoder.module.x"};
    for (size_t i = 0; i < 5; i++) {
        CHECK_EQ_INT(ckpt_key_wrappers(plain[i], strlen(plain[i])), 0);
        ckpt_key_drop_wrappers(plain[i], strlen(plain[i]), out);
        CHECK_EQ_STR(out, plain[i]);
    }
}

/* ------------------------------------------------------------ match */

static const char *const MODEL[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", NULL};

TEST(identical_sets) {
    ckpt_match_result *r = match(MODEL, MODEL, NULL);
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK_EQ_INT(ckpt_match_matched(r), 4);
    CHECK(ckpt_match_rewrite(r) == NULL);
    CHECK_EQ_INT(ckpt_match_candidate_count(r), 0);
    CHECK(ckpt_match_warning(r) == NULL);
    CHECK(ckpt_match_rewritten(r, 0) == NULL);
    done(r);
}

/* Full names only: "fc1.weight.bad_key" is not part of "fc1.weight". */
TEST(exact_full_names) {
    const char *c[] = {"fc1.weight.bad_key", "fc1.bias", "fc2.weight", "fc2.bias", NULL};
    ckpt_match_result *r = match(c, MODEL, NULL);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    CHECK_EQ_STR(names(r, CKPT_MATCH_MISSING), "fc1.weight");
    CHECK_EQ_STR(names(r, CKPT_MATCH_UNEXPECTED), "fc1.weight.bad_key");
    CHECK(ckpt_match_rewrite(r) == NULL);
    CHECK_EQ_INT(ckpt_match_matched(r), 3);
    CHECK_EQ_INT(ckpt_match_count(r, CKPT_MATCH_SHAPE_MISMATCH), 0);
    done(r);
}

TEST(strip_module_normalize) {
    const char *c[] = {"module.fc1.weight", "module.fc1.bias", "module.fc2.weight",
                       "module.fc2.bias", NULL};
    ckpt_match_result *r = match(c, MODEL, NULL);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    CHECK_EQ_STR(rewrite_desc(r), "strip 'module.'");
    CHECK_EQ_INT(ckpt_match_rewrite(r)->matches, 4);
    CHECK_EQ_INT(ckpt_match_rewrite(r)->applied, 0);
    CHECK_EQ_INT(ckpt_match_count(r, CKPT_MATCH_MISSING), 4);
    CHECK_EQ_STR(ckpt_match_warning(r), "nothing would load: 0 of 4 expected keys match");
    CHECK_EQ_STR(ckpt_match_rewritten(r, 2), "fc2.weight");
    done(r);

    ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
    o.normalize = 1;
    r = match(c, MODEL, &o);
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK_EQ_INT(ckpt_match_rewrite(r)->applied, 1);
    CHECK_EQ_INT(ckpt_match_matched(r), 4);
    CHECK(ckpt_match_warning(r) == NULL);
    done(r);

    /* a DataParallel state dict with a root tensor besides module.*: the
     * bare keys torch's load_state_dict would get after the strip hold
     * 'extra', an unexpected key (not an entry beside a model subtree, as
     * DeepSpeed's {"module": sd, "optimizer": ...} has): the rewrite is
     * not applied, every key stays unexpected */
    const char *dp_extra[] = {"module.fc1.weight", "module.fc1.bias", "module.fc2.weight",
                              "module.fc2.bias",   "extra",           NULL};
    r = match(dp_extra, MODEL, &o);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    CHECK_EQ_STR(rewrite_desc(r), "strip 'module.'");
    CHECK_EQ_INT(ckpt_match_rewrite(r)->applied, 0);
    CHECK_EQ_INT(ckpt_match_count(r, CKPT_MATCH_UNEXPECTED), 5);
    done(r);
}

TEST(stacked_and_mid_key_wrappers) {
    const char *c1[] = {"_orig_mod.module.fc1.weight", "_orig_mod.module.fc1.bias",
                        "_orig_mod.module.fc2.weight", "_orig_mod.module.fc2.bias", NULL};
    const char *c2[] = {"module._orig_mod.fc1.weight", "module._orig_mod.fc1.bias",
                        "module._orig_mod.fc2.weight", "module._orig_mod.fc2.bias", NULL};
    const char *c3[] = {"fc1._fsdp_wrapped_module.weight", "fc1._fsdp_wrapped_module.bias",
                        "fc2._checkpoint_wrapped_module.weight",
                        "fc2._checkpoint_wrapped_module.bias", NULL};
    ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
    o.normalize = 1;
    /* stacked leading wrappers are one prefix; dropping '_orig_mod.' and
     * stripping 'module.' forms the same pairs and is not simpler */
    ckpt_match_result *r = match(c1, MODEL, &o);
    CHECK_EQ_STR(rewrite_desc(r), "strip '_orig_mod.module.'");
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK_EQ_INT(ckpt_match_candidate_count(r), 1);
    done(r);
    r = match(c2, MODEL, &o);
    CHECK_EQ_STR(rewrite_desc(r), "strip 'module._orig_mod.'");
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    done(r);
    r = match(c3, MODEL, &o);
    CHECK_EQ_STR(rewrite_desc(r),
                 "drop '_fsdp_wrapped_module.', '_checkpoint_wrapped_module.' segments");
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    done(r);
    /* a leading prefix and a wrapper in the middle of keys */
    const char *c4[] = {"module.fc1._orig_mod.weight", "module.fc1._orig_mod.bias",
                        "module.fc2.weight", "module.fc2.bias", NULL};
    r = match(c4, MODEL, &o);
    CHECK_EQ_STR(rewrite_desc(r), "drop '_orig_mod.' segments, strip 'module.'");
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK_EQ_STR(ckpt_match_rewritten(r, 0), "fc1.weight");
    done(r);
    /* the other way round: the model is wrapped, the checkpoint is not */
    const char *wrapped[] = {"_orig_mod.fc1.weight", "_orig_mod.fc1.bias", "_orig_mod.fc2.weight",
                             "_orig_mod.fc2.bias", NULL};
    r = match(MODEL, wrapped, &o);
    CHECK_EQ_STR(rewrite_desc(r), "add '_orig_mod.'");
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    done(r);
}

/* "module" in the middle of an ordinary key is a name, never a wrapper. */
TEST(never_strip_ordinary_middle_segment) {
    const char *e[] = {"encoder.x", "encoder.y", NULL};
    const char *c[] = {"encoder.module.x", "encoder.module.y", NULL};
    ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
    o.normalize = 1;
    ckpt_match_result *r = match(c, e, &o);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    CHECK(ckpt_match_rewrite(r) == NULL || !ckpt_match_rewrite(r)->applied);
    CHECK_EQ_STR(names(r, CKPT_MATCH_UNEXPECTED), "encoder.module.x,encoder.module.y");
    done(r);
    /* and a legitimate encoder.module.x survives a stripped wrapper */
    const char *c2[] = {"module.encoder.module.x", "module.encoder.module.y", NULL};
    const char *e2[] = {"encoder.module.x", "encoder.module.y", NULL};
    r = match(c2, e2, &o);
    CHECK_EQ_STR(rewrite_desc(r), "strip 'module.'");
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK_EQ_STR(ckpt_match_rewritten(r, 0), "encoder.module.x");
    done(r);
}

/* One key without the prefix keeps its name and pairs by it, as torch's
 * consume_prefix_in_state_dict_if_present leaves it: the rewrite
 * completes the match (it was called partial and not applied). */
TEST(partial_prefix) {
    const char *c[] = {"module.fc1.weight", "module.fc1.bias", "module.fc2.weight", "fc2.bias",
                       NULL};
    ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
    o.normalize = 1;
    ckpt_match_result *r = match(c, MODEL, &o);
    CHECK_EQ_STR(rewrite_desc(r), "strip 'module.'");
    CHECK_EQ_INT(ckpt_match_rewrite(r)->matches, 4);
    CHECK_EQ_INT(ckpt_match_rewrite(r)->applied, 1);
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK_EQ_INT(ckpt_match_matched(r), 4);
    CHECK_EQ_STR(ckpt_match_rewritten(r, 3), "fc2.bias");
    CHECK(ckpt_match_warning(r) == NULL);
    done(r);
    /* a key neither the rewrite nor its own name pairs stays unexpected */
    const char *d[] = {"module.fc1.weight", "module.fc1.bias", "module.fc2.weight", "fc2.extra",
                       NULL};
    r = match(d, MODEL, &o);
    CHECK_EQ_STR(rewrite_desc(r), "strip 'module.'");
    CHECK_EQ_INT(ckpt_match_rewrite(r)->matches, 3);
    CHECK_EQ_INT(ckpt_match_rewrite(r)->applied, 0);
    CHECK_EQ_STR(names(r, CKPT_MATCH_MISSING), "fc1.bias,fc1.weight,fc2.bias,fc2.weight");
    done(r);
}

/* F2: a subtree rule leaves out only root entries holding no tensor
 * themselves. {"model.a", "model.b", "lm_head.weight"} as one flat state
 * dict: torch's strict load of it, "model." stripped, rejects
 * lm_head.weight; as a "model" entry beside an "optimizer" one the others
 * are set aside. */
TEST(select_root_entries) {
    const char *c[] = {"model.a", "model.b", "lm_head.weight", NULL};
    const char *e[] = {"a", "b", NULL};
    ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
    o.normalize = 1;
    ckpt_match_result *r = NULL;
    ckpt_manifest *mc = manifest_of(c), *me = manifest_of(e);
    CHECK_EQ_INT(ckpt_manifest_add_root_entry(mc, "model.a", 1), 0);
    CHECK_EQ_INT(ckpt_manifest_add_root_entry(mc, "model.b", 1), 0);
    CHECK_EQ_INT(ckpt_manifest_add_root_entry(mc, "lm_head.weight", 1), 0);
    CHECK_EQ_INT(ckpt_match(&r, mc, me, &o), 0);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    CHECK_EQ_INT(ckpt_match_ignored_count(r), 0);
    CHECK_EQ_STR(rewrite_desc(r), "strip 'model.'");
    CHECK_EQ_INT(ckpt_match_rewrite(r)->applied, 0);
    ckpt_match_result_free(r);
    ckpt_manifest_free(mc);
    /* nested: {"model": {...}, "lm_head.weight": t}: a tensor at the root */
    mc = manifest_of(c);
    CHECK_EQ_INT(ckpt_manifest_add_root_entry(mc, "model", 0), 0);
    CHECK_EQ_INT(ckpt_manifest_add_root_entry(mc, "lm_head.weight", 1), 0);
    CHECK_EQ_INT(ckpt_match(&r, mc, me, &o), 0);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    ckpt_match_result_free(r);
    ckpt_manifest_free(mc);
    /* {"model": {...}, "lm_head": {...}}: an entry of its own, set aside */
    mc = manifest_of(c);
    CHECK_EQ_INT(ckpt_manifest_add_root_entry(mc, "model", 0), 0);
    CHECK_EQ_INT(ckpt_manifest_add_root_entry(mc, "lm_head", 0), 0);
    CHECK_EQ_INT(ckpt_match(&r, mc, me, &o), 0);
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK_EQ_INT(ckpt_match_ignored_count(r), 1);
    CHECK_EQ_STR(ckpt_match_ignored(r, 0), "lm_head");
    ckpt_match_result_free(r);
    ckpt_manifest_free(mc);
    ckpt_manifest_free(me);
}

/* A renamed part of the model (layers. -> blocks.) covering half of the
 * keys or fewer: the keys it leaves keep their names, so it completes the
 * match (F1: "would not give a complete match" at 12 of 16 keys, no
 * rewrite at all at 4 of 8). */
TEST(renamed_part) {
    const char *c[] = {"blocks.0.fc.bias",   "blocks.0.fc.weight", "blocks.1.fc.bias",
                       "blocks.1.fc.weight", "embed.weight",       "head.weight",
                       "norm.bias",          "norm.weight",        NULL};
    const char *e[] = {
        "layers.0.fc.bias",   "layers.0.fc.weight", "layers.1.fc.bias",
        "layers.1.fc.weight", "embed.weight",       "head.weight",
        "norm.bias",          "norm.weight",        NULL}; /* shapes in the checkpoint's order */
    ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
    ckpt_match_result *r = match(c, e, &o);
    CHECK_EQ_STR(rewrite_desc(r), "replace 'blocks.' with 'layers.'");
    CHECK_EQ_INT(ckpt_match_rewrite(r)->matches, 8);
    CHECK_EQ_INT(ckpt_match_rewrite(r)->applied, 0);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    done(r);
    o.normalize = 1;
    r = match(c, e, &o);
    CHECK_EQ_INT(ckpt_match_rewrite(r)->applied, 1);
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK_EQ_INT(ckpt_match_matched(r), 8);
    CHECK_EQ_STR(ckpt_match_rewritten(r, 0), "layers.0.fc.bias");
    CHECK_EQ_STR(ckpt_match_rewritten(r, 4), "embed.weight");
    done(r);
    /* a rename of a few keys pairing one by coincidence is no rewrite */
    const char *f[] = {"x.weight", "y.weight", "z.weight", "fc1.weight", NULL};
    const char *g[] = {"a.weight", "b.weight", "c.weight", "fc2.weight", NULL};
    o.normalize = 0;
    r = match(f, g, &o);
    CHECK(ckpt_match_rewrite(r) == NULL);
    done(r);
}

/* A BatchNorm's num_batches_tracked the checkpoint lacks: defaulted where
 * its _metadata gives the module no version 2, as torch's strict
 * load_state_dict fills it (module versions through the applied rewrite);
 * missing with version 2 or with no key of the module paired; allowed by
 * a glob first; a manifest without the fields reads as before. */
TEST(batchnorm_counter_defaulted) {
#define BN_T(n, s) "{\"name\":\"" n "\",\"dtype\":\"F32\",\"shape\":[" s "]}"
#define BN_CKPT(p)                                                                                 \
    BN_T(p "bn.weight", "2") "," BN_T(p "bn.running_mean", "2") "," BN_T(p "fc.weight", "2")
    const char *spec = "{\"tensors\":[" BN_CKPT("") "," BN_T(
        "bn.num_batches_tracked", "") "],"
                                      "\"batchnorm_counters\":[\"bn.num_batches_tracked\"]}";
    static const struct {
        const char *ckpt;
        int complete;
        const char *missing, *defaulted;
    } cases[] = {
        {"{\"tensors\":[" BN_CKPT("") "]}", 1, "", "bn.num_batches_tracked"},
        {"{\"tensors\":[" BN_CKPT("") "],\"module_versions\":{\"bn\":1,\"\":1}}", 1, "",
         "bn.num_batches_tracked"},
        {"{\"module_versions\":{\"bn\":2},\"tensors\":[" BN_CKPT("") "]}", 0,
         "bn.num_batches_tracked", ""},
        /* {'model': sd} under a rewrite: the version is the subtree's */
        {"{\"tensors\":[" BN_CKPT("model.") "],\"module_versions\":{\"model.bn\":1}}", 1, "",
         "bn.num_batches_tracked"},
        {"{\"tensors\":[" BN_CKPT("model.") "],\"module_versions\":{\"model.bn\":2,\"bn\":1}}", 0,
         "bn.num_batches_tracked,bn.running_mean,bn.weight,fc.weight", ""},
        {"{\"tensors\":[" BN_CKPT("module.") "],\"module_versions\":{\"module.bn\":0}}", 1, "",
         "bn.num_batches_tracked"},
        /* no key of the module paired: not known to the checkpoint */
        {"{\"tensors\":[" BN_T("fc.weight", "2") "]}", 0,
         "bn.num_batches_tracked,bn.running_mean,bn.weight", ""},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ckpt_manifest *c = NULL, *e = NULL;
        ckpt_match_result *r = NULL;
        ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
        o.normalize = 1;
        CHECK_EQ_INT(ckpt_manifest_parse(&c, cases[k].ckpt, strlen(cases[k].ckpt), "c", NULL), 0);
        CHECK_EQ_INT(ckpt_manifest_parse(&e, spec, strlen(spec), "e", NULL), 0);
        CHECK_EQ_INT(ckpt_match(&r, c, e, &o), 0);
        CHECK_EQ_INT(ckpt_match_complete(r), cases[k].complete);
        CHECK_EQ_STR(names(r, CKPT_MATCH_MISSING), cases[k].missing);
        CHECK_EQ_STR(names(r, CKPT_MATCH_DEFAULTED), cases[k].defaulted);
        ckpt_match_result_free(r);
        ckpt_manifest_free(c);
        ckpt_manifest_free(e);
    }
    /* a glob allows it first; an old manifest (no batchnorm_counters) and
     * the jansson path (an escaped key defers the one pass) */
    const char *old = "{\"tensors\":[" BN_CKPT("") "," BN_T("bn.num_batches_tracked", "") "]}";
    const char *esc = "{\"tensors\":[" BN_CKPT("") "," BN_T(
        "bn.num_batches_tracked",
        "") "],"
            "\"batchnorm_counters\":[\"bn.num_batches_tracked\"],\"\\u0078\":0}";
    const char *ck = "{\"tensors\":[" BN_CKPT("") "],\"module_versions\":{\"bn\":1}}";
    const char *glob = "*.num_batches_tracked";
    ckpt_manifest *c = NULL, *e = NULL;
    ckpt_match_result *r = NULL;
    ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
    CHECK_EQ_INT(ckpt_manifest_parse(&c, ck, strlen(ck), "c", NULL), 0);
    CHECK_EQ_INT(ckpt_manifest_version_count(c), 1);
    int64_t v = 0;
    CHECK_EQ_STR(ckpt_manifest_version_at(c, 0, &v), "bn");
    CHECK_EQ_INT(v, 1);
    CHECK_EQ_INT(ckpt_manifest_parse(&e, spec, strlen(spec), "e", NULL), 0);
    o.allow_missing = &glob;
    o.nallow_missing = 1;
    CHECK_EQ_INT(ckpt_match(&r, c, e, &o), 0);
    CHECK_EQ_STR(names(r, CKPT_MATCH_ALLOWED_MISSING), "bn.num_batches_tracked");
    CHECK_EQ_INT(ckpt_match_count(r, CKPT_MATCH_DEFAULTED), 0);
    ckpt_match_result_free(r);
    ckpt_manifest_free(e);
    CHECK_EQ_INT(ckpt_manifest_parse(&e, old, strlen(old), "e", NULL), 0);
    CHECK_EQ_INT(ckpt_match(&r, c, e, NULL), 0);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    CHECK_EQ_STR(names(r, CKPT_MATCH_MISSING), "bn.num_batches_tracked");
    ckpt_match_result_free(r);
    ckpt_manifest_free(e);
    CHECK_EQ_INT(ckpt_manifest_parse(&e, esc, strlen(esc), "e", NULL), 0);
    CHECK_EQ_STR(ckpt_manifest_batchnorm_counter(e, 0), "bn.num_batches_tracked");
    CHECK_EQ_INT(ckpt_match(&r, c, e, NULL), 0);
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK_EQ_STR(names(r, CKPT_MATCH_DEFAULTED), "bn.num_batches_tracked");
    ckpt_match_result_free(r);
    ckpt_manifest_free(e);
    ckpt_manifest_free(c);
    /* refused: a counter naming no tensor, a version that is no integer */
    static const char *const refused[] = {
        "{\"tensors\":[" BN_T("a", "1") "],\"batchnorm_counters\":[\"b\"]}",
        "{\"tensors\":[" BN_T("a", "1") "],\"batchnorm_counters\":\"a\"}",
        "{\"tensors\":[" BN_T("a", "1") "],\"module_versions\":{\"bn\":1.5}}",
        "{\"tensors\":[" BN_T("a", "1") "],\"module_versions\":[1]}",
        "{\"tensors\":[" BN_T("a", "1") "],\"module_versions\":{\"bn\":1,\"bn\":2}}",
    };
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        CHECK_EQ_INT(ckpt_manifest_parse(&c, refused[k], strlen(refused[k]), "c", NULL),
                     CKPT_E_FORMAT);
        CHECK(c == NULL);
    }
#undef BN_CKPT
#undef BN_T
}

/* Two rewrites match as many keys: nothing is named, both are listed. */
TEST(tied_candidates) {
    const char *c[] = {"weight", "bias", NULL};
    const char *e[] = {"a.weight", "a.bias", "b.weight", "b.bias", NULL};
    ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
    o.normalize = 1;
    ckpt_match_result *r = match(c, e, &o);
    CHECK(ckpt_match_rewrite(r) == NULL);
    CHECK_EQ_INT(ckpt_match_candidate_count(r), 2);
    CHECK_EQ_STR(ckpt_match_candidate(r, 0)->description, "add 'a.'");
    CHECK_EQ_STR(ckpt_match_candidate(r, 1)->description, "add 'b.'");
    CHECK_EQ_INT(ckpt_match_candidate(r, 0)->matches, 2);
    CHECK_EQ_STR(ckpt_match_warning(r), "nothing would load: 0 of 4 expected keys match");
    done(r);
}

/* A training checkpoint {"model": state dict, "optimizer": ..., ...}: the
 * model entry pairs with every expected key while covering less than half
 * of the keys; the other top-level entries are ignored, not unexpected. */
TEST(training_checkpoint_subtree) {
    const char *c[] = {"model.fc1.weight",
                       "model.fc1.bias",
                       "model.fc2.weight",
                       "model.fc2.bias",
                       "optimizer.state.0.exp_avg",
                       "optimizer.state.0.exp_avg_sq",
                       "optimizer.state.1.exp_avg",
                       "optimizer.state.1.exp_avg_sq",
                       "scheduler.last",
                       NULL};
    ckpt_match_result *r = match(c, MODEL, NULL);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    CHECK_EQ_STR(rewrite_desc(r),
                 "strip 'model.' (other top-level entries ignored: optimizer, scheduler)");
    CHECK_EQ_INT(ckpt_match_rewrite(r)->matches, 4);
    CHECK_EQ_INT(ckpt_match_rewrite(r)->applied, 0);
    CHECK_EQ_INT(ckpt_match_count(r, CKPT_MATCH_UNEXPECTED), 9); /* keys as they are */
    CHECK_EQ_INT(ckpt_match_ignored_count(r), 2);
    done(r);

    ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
    o.normalize = 1;
    r = match(c, MODEL, &o);
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK_EQ_INT(ckpt_match_matched(r), 4);
    CHECK_EQ_INT(ckpt_match_rewrite(r)->applied, 1);
    CHECK_EQ_STR(names(r, CKPT_MATCH_UNEXPECTED), "");
    CHECK_EQ_INT(ckpt_match_ignored_count(r), 2);
    CHECK_EQ_STR(ckpt_match_ignored(r, 0), "optimizer");
    CHECK_EQ_STR(ckpt_match_ignored(r, 1), "scheduler");
    CHECK(ckpt_match_ignored(r, 2) == NULL);
    CHECK(ckpt_match_warning(r) == NULL);
    done(r);

    /* a model entry missing a key is no subtree match: nothing inferred */
    const char *short_model[] = {"model.fc1.weight",
                                 "model.fc1.bias",
                                 "model.fc2.weight",
                                 "optimizer.a",
                                 "optimizer.b",
                                 "optimizer.c",
                                 NULL};
    r = match(short_model, MODEL, &o);
    CHECK(ckpt_match_rewrite(r) == NULL);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    CHECK_EQ_INT(ckpt_match_ignored_count(r), 0);
    done(r);
    /* a subtree with an extra key is none either */
    const char *extra[] = {"model.fc1.weight",
                           "model.fc1.bias",
                           "model.fc2.weight",
                           "model.fc2.bias",
                           "model.head",
                           "optimizer.a",
                           "optimizer.b",
                           "optimizer.c",
                           "optimizer.d",
                           "optimizer.e",
                           NULL};
    r = match(extra, MODEL, &o);
    CHECK(ckpt_match_rewrite(r) == NULL);
    done(r);
    /* keys outside it that share its first segment: no whole entry */
    const char *nested[] = {"state.model.fc1.weight",
                            "state.model.fc1.bias",
                            "state.model.fc2.weight",
                            "state.model.fc2.bias",
                            "state.ema.a",
                            "state.ema.b",
                            "state.ema.c",
                            "state.ema.d",
                            "state.ema.e",
                            NULL};
    r = match(nested, MODEL, &o);
    CHECK(ckpt_match_rewrite(r) == NULL);
    done(r);
    /* two entries holding the model (model, ema): a tie, nothing applied */
    const char *two[] = {"model.fc1.weight", "model.fc1.bias",
                         "model.fc2.weight", "model.fc2.bias",
                         "ema.fc1.weight",   "ema.fc1.bias",
                         "ema.fc2.weight",   "ema.fc2.bias",
                         "optimizer.a",      NULL};
    r = match(two, MODEL, &o);
    CHECK(ckpt_match_rewrite(r) == NULL);
    CHECK_EQ_INT(ckpt_match_candidate_count(r), 2);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    done(r);
}

/* A rewrite that maps two keys onto one name is never applied. */
TEST(collision) {
    const char *c[] = {"_orig_mod.a", "_orig_mod.b", "a", NULL};
    const char *e[] = {"a", "b", NULL};
    ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
    o.normalize = 1;
    o.allow_unexpected = (const char *const[]){"*"};
    o.nallow_unexpected = 1;
    ckpt_match_result *r = match(c, e, &o);
    CHECK_EQ_STR(rewrite_desc(r), "strip '_orig_mod.' (not applicable: '_orig_mod.a' and 'a' "
                                  "both become 'a')");
    CHECK(ckpt_match_rewrite(r) && !ckpt_match_rewrite(r)->applied);
    CHECK_EQ_INT(ckpt_match_matched(r), 0);
    CHECK_EQ_STR(names(r, CKPT_MATCH_SHAPE_MISMATCH), "a"); /* shapes [3] and [1] */
    CHECK_EQ_STR(names(r, CKPT_MATCH_MISSING), "b");
    done(r);
}

TEST(allowed_exceptions) {
    const char *c[] = {"fc1.weight", "fc1.bias", "aux.head", NULL};
    const char *e[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", NULL};
    ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
    o.allow_missing = (const char *const[]){"fc2.*"};
    o.nallow_missing = 1;
    ckpt_match_result *r = match(c, e, &o);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    CHECK_EQ_STR(names(r, CKPT_MATCH_ALLOWED_MISSING), "fc2.bias,fc2.weight");
    CHECK_EQ_STR(names(r, CKPT_MATCH_MISSING), "");
    CHECK_EQ_STR(names(r, CKPT_MATCH_UNEXPECTED), "aux.head");
    done(r);
    o.allow_unexpected = (const char *const[]){"nomatch", "aux*"};
    o.nallow_unexpected = 2;
    r = match(c, e, &o);
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK_EQ_STR(names(r, CKPT_MATCH_ALLOWED_UNEXPECTED), "aux.head");
    CHECK(ckpt_match_warning(r) == NULL); /* 2 of 4 is half */
    done(r);
    /* everything allowed, nothing loads: called out, and not complete */
    o.allow_missing = (const char *const[]){"*"};
    o.allow_unexpected = (const char *const[]){"*"};
    o.nallow_unexpected = 1;
    const char *other[] = {"x", NULL};
    r = match(other, e, &o);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    CHECK_EQ_INT(ckpt_match_count(r, CKPT_MATCH_ALLOWED_MISSING), 4);
    CHECK_EQ_STR(ckpt_match_warning(r), "nothing would load: 0 of 4 expected keys match");
    done(r);
}

TEST(dtype_and_shape) {
    ckpt_manifest *c = NULL, *e = NULL;
    uint64_t s1[2] = {4, 3}, s2[2] = {5, 3};
    ckpt_manifest_new(&c, "c");
    ckpt_manifest_new(&e, "e");
    ckpt_manifest_add(c, "w", "F32", 2, s1);
    ckpt_manifest_add(e, "w", "F32", 2, s2);
    ckpt_manifest_add(c, "b", "F16", 1, s1);
    ckpt_manifest_add(e, "b", "F32", 1, s1);
    ckpt_manifest_add(c, "both", "F16", 1, s1);
    ckpt_manifest_add(e, "both", "F32", 1, s2);
    ckpt_match_result *r = NULL;
    CHECK_EQ_INT(ckpt_match(&r, c, e, NULL), 0);
    CHECK_EQ_STR(names(r, CKPT_MATCH_SHAPE_MISMATCH), "both,w");
    CHECK_EQ_STR(names(r, CKPT_MATCH_DTYPE_MISMATCH), "b,both");
    CHECK_EQ_INT(ckpt_match_matched(r), 0);
    const ckpt_match_item *it = ckpt_match_item_at(r, CKPT_MATCH_SHAPE_MISMATCH, 1);
    CHECK(it->checkpoint->shape[0] == 4 && it->expected->shape[0] == 5);
    CHECK(ckpt_match_item_at(r, CKPT_MATCH_SHAPE_MISMATCH, 2) == NULL);
    ckpt_match_result_free(r);
    ckpt_manifest_free(c);
    ckpt_manifest_free(e);
}

/* Ties a manifest records (ckpt.manifest(model), JSON "ties"): a missing
 * key whose tie partner is matched with its dtype and shape is satisfied
 * and listed under TIED, one whose dtype alone differs too (its dtype
 * mismatch is reported); a partner of another shape fills nothing; ties are transitive; a bad tie is refused. */
TEST(tied_by_manifest) {
    const char *ckpt =
        "{\"tensors\":[{\"name\":\"embed.weight\",\"dtype\":\"F32\",\"shape\":[4,2]},"
        "{\"name\":\"b\",\"dtype\":\"F32\",\"shape\":[3]}]}";
    const char *spec =
        "{\"tensors\":[{\"name\":\"embed.weight\",\"dtype\":\"F32\",\"shape\":[4,2]},"
        "{\"name\":\"lm_head.weight\",\"dtype\":\"F32\",\"shape\":[4,2]},"
        "{\"name\":\"out.weight\",\"dtype\":\"F32\",\"shape\":[4,2]},"
        "{\"name\":\"b\",\"dtype\":\"F32\",\"shape\":[3]}],"
        "\"ties\":[[\"lm_head.weight\",\"embed.weight\"],[\"out.weight\",\"lm_head.weight\"]]}";
    ckpt_manifest *c = NULL, *e = NULL;
    CHECK_EQ_INT(ckpt_manifest_parse(&c, ckpt, strlen(ckpt), "c", NULL), 0);
    CHECK_EQ_INT(ckpt_manifest_parse(&e, spec, strlen(spec), "e", NULL), 0);
    ckpt_match_result *r = NULL;
    CHECK_EQ_INT(ckpt_match(&r, c, e, NULL), 0);
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK_EQ_INT(ckpt_match_matched(r), 2);
    CHECK_EQ_STR(names(r, CKPT_MATCH_MISSING), "");
    CHECK_EQ_STR(names(r, CKPT_MATCH_TIED), "lm_head.weight,out.weight");
    CHECK_EQ_STR(ckpt_match_item_at(r, CKPT_MATCH_TIED, 1)->tied_to, "embed.weight");
    CHECK(ckpt_match_warning(r) == NULL);
    ckpt_match_result_free(r);
    ckpt_manifest_free(c);

    /* the partner's checkpoint tensor has another shape: nothing filled */
    const char *bad = "{\"tensors\":[{\"name\":\"embed.weight\",\"dtype\":\"F32\",\"shape\":[2,4]},"
                      "{\"name\":\"b\",\"dtype\":\"F32\",\"shape\":[3]}]}";
    CHECK_EQ_INT(ckpt_manifest_parse(&c, bad, strlen(bad), "c", NULL), 0);
    CHECK_EQ_INT(ckpt_match(&r, c, e, NULL), 0);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    CHECK_EQ_STR(names(r, CKPT_MATCH_MISSING), "lm_head.weight,out.weight");
    CHECK_EQ_INT(ckpt_match_count(r, CKPT_MATCH_TIED), 0);
    ckpt_match_result_free(r);
    ckpt_manifest_free(c);

    /* an F16 copy of the model (lm_head stored once, as save_pretrained
     * does): the dtypes differ, which torch's load_state_dict casts, so the
     * tie is filled (not missing) and something loads (no warning); the
     * tie used to be missing and the warning "nothing would load: 0 of 4" */
    const char *half =
        "{\"tensors\":[{\"name\":\"embed.weight\",\"dtype\":\"F16\",\"shape\":[4,2]},"
        "{\"name\":\"b\",\"dtype\":\"F16\",\"shape\":[3]}]}";
    CHECK_EQ_INT(ckpt_manifest_parse(&c, half, strlen(half), "c", NULL), 0);
    CHECK_EQ_INT(ckpt_match(&r, c, e, NULL), 0);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    CHECK_EQ_STR(names(r, CKPT_MATCH_DTYPE_MISMATCH), "b,embed.weight");
    CHECK_EQ_STR(names(r, CKPT_MATCH_MISSING), "");
    CHECK_EQ_STR(names(r, CKPT_MATCH_TIED), "lm_head.weight,out.weight");
    CHECK(ckpt_match_warning(r) == NULL);
    ckpt_match_result_free(r);
    ckpt_manifest_free(c);
    ckpt_manifest_free(e);

    /* built by hand: ckpt_manifest_tie */
    uint64_t s42[2] = {4, 2}, s3[1] = {3};
    CHECK_EQ_INT(ckpt_manifest_new(&e, "model"), 0);
    CHECK_EQ_INT(ckpt_manifest_add(e, "embed.weight", "F32", 2, s42), 0);
    CHECK_EQ_INT(ckpt_manifest_add(e, "lm_head.weight", "F32", 2, s42), 0);
    CHECK_EQ_INT(ckpt_manifest_add(e, "b", "F32", 1, s3), 0);
    CHECK_EQ_INT(ckpt_manifest_tie(e, "lm_head.weight", "nope"), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_manifest_tie(e, "lm_head.weight", "b"), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_manifest_tie(e, "lm_head.weight", "embed.weight"), 0);
    CHECK_EQ_INT(ckpt_manifest_parse(&c, ckpt, strlen(ckpt), "c", NULL), 0);
    CHECK_EQ_INT(ckpt_match(&r, c, e, NULL), 0);
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK_EQ_STR(names(r, CKPT_MATCH_TIED), "lm_head.weight");
    ckpt_match_result_free(r);
    ckpt_manifest_free(c);
    ckpt_manifest_free(e);

    static const char *const refused[] = {
        "{\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[3]}],\"ties\":[[\"a\",\"z\"]]}",
        ("{\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[3]},"
         "{\"name\":\"b\",\"dtype\":\"F16\",\"shape\":[3]}],\"ties\":[[\"a\",\"b\"]]}"),
        "{\"tensors\":[],\"ties\":{}}",
        "{\"tensors\":[],\"ties\":[\"a\"]}",
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        CHECK_EQ_INT(ckpt_manifest_parse(&e, refused[i], strlen(refused[i]), "e", NULL),
                     CKPT_E_FORMAT);
        CHECK(e == NULL);
    }
}

/* A PEFT LoRA adapter against its base model: no key is the model's, and
 * instead of "nothing would load" the match says what the file is and
 * whether its target modules and factor shapes fit the model. */
TEST(peft_adapter) {
    uint64_t w[2] = {32, 64}, emb[2] = {100, 64}, a8x64[2] = {8, 64}, b32x8[2] = {32, 8},
             b16x8[2] = {16, 8}, ea[2] = {8, 100}, eb[2] = {64, 8};
    ckpt_manifest *e = NULL, *c = NULL;
    ckpt_match_result *r = NULL;
    CHECK_EQ_INT(ckpt_manifest_new(&e, "base"), 0);
    ckpt_manifest_add(e, "model.embed.weight", "F32", 2, emb);
    ckpt_manifest_add(e, "model.q_proj.weight", "F32", 2, w);
    ckpt_manifest_add(e, "model.v_proj.base_layer.weight", "F32", 2, w);
    for (int v = 0; v < 3; v++) {
        CHECK_EQ_INT(ckpt_manifest_new(&c, "adapter"), 0);
        ckpt_manifest_add(c, "base_model.model.model.q_proj.lora_A.weight", "F32", 2, a8x64);
        ckpt_manifest_add(c, "base_model.model.model.q_proj.lora_B.weight", "F32", 2,
                          v == 1 ? b16x8 : b32x8);
        ckpt_manifest_add(c, "base_model.model.model.v_proj.lora_A.weight", "F32", 2, a8x64);
        ckpt_manifest_add(c, "base_model.model.model.v_proj.lora_B.weight", "F32", 2, b32x8);
        ckpt_manifest_add(c,
                          v == 2 ? "base_model.model.model.o_proj.lora_A.weight"
                                 : "base_model.model.model.embed.lora_embedding_A",
                          "F32", 2, ea);
        ckpt_manifest_add(c, "base_model.model.model.embed.lora_embedding_B", "F32", 2, eb);
        CHECK_EQ_INT(ckpt_match(&r, c, e, NULL), 0);
        CHECK_EQ_INT(ckpt_match_complete(r), 0);
        CHECK_EQ_INT(ckpt_match_count(r, CKPT_MATCH_UNEXPECTED), 6);
        static const char *const want[] = {
            ("a PEFT LoRA adapter, not weights of this model (6 lora_A/lora_B keys for 3 target "
             "modules): every target module is in the expected model, with the shapes its "
             "factors need; load the base weights, then apply the adapter (PEFT)"),
            ("a PEFT LoRA adapter, not weights of this model (6 lora_A/lora_B keys for 3 target "
             "modules): 1 factor has the wrong size for the base weight "
             "(base_model.model.model.q_proj.lora_B.weight [16, 8] against model.q_proj.weight "
             "[32, 64])"),
            ("a PEFT LoRA adapter, not weights of this model (6 lora_A/lora_B keys for 3 target "
             "modules): 1 target module is not in the expected model (model.o_proj)"),
        };
        CHECK_EQ_STR(ckpt_match_warning(r), want[v]);
        ckpt_match_result_free(r);
        ckpt_manifest_free(c);
    }
    /* a state dict that happens to hold one LoRA factor is not an adapter */
    const char *plain[] = {"x.weight", "y.weight", "z.lora_A.weight", NULL};
    r = match(plain, MODEL, NULL);
    CHECK_EQ_STR(ckpt_match_warning(r), "nothing would load: 0 of 4 expected keys match");
    done(r);
    ckpt_manifest_free(e);
}

/* Tied weights through metadata aliases of the checkpoint (safetensors
 * save_model: dropped name -> kept name), under a rewrite too. */
TEST(tied_by_alias) {
    const char *json =
        "{\"tensors\":[{\"name\":\"module.embed.weight\",\"dtype\":\"F32\",\"shape\":[4,2]}],"
        "\"metadata\":{\"module.lm_head.weight\":\"module.embed.weight\",\"format\":\"pt\"}}";
    const char *spec =
        "{\"tensors\":[{\"name\":\"embed.weight\",\"dtype\":\"F32\",\"shape\":[4,2]},"
        "{\"name\":\"lm_head.weight\",\"dtype\":\"F32\",\"shape\":[4,2]}]}";
    ckpt_manifest *c = NULL, *e = NULL;
    CHECK_EQ_INT(ckpt_manifest_parse(&c, json, strlen(json), "c", NULL), 0);
    CHECK_EQ_INT(ckpt_manifest_parse(&e, spec, strlen(spec), "e", NULL), 0);
    ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
    o.normalize = 1;
    o.allow_missing = (const char *const[]){"lm_head.weight"};
    o.nallow_missing = 1;
    ckpt_match_result *r = NULL;
    CHECK_EQ_INT(ckpt_match(&r, c, e, &o), 0);
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK_EQ_STR(rewrite_desc(r), "strip 'module.'");
    /* the model does not tie them: a loader that ignores the metadata
     * leaves lm_head at its init, so the key stays missing (allowed
     * here), and TIED names the tie the checkpoint declares */
    CHECK_EQ_STR(names(r, CKPT_MATCH_ALLOWED_MISSING), "lm_head.weight");
    CHECK_EQ_STR(names(r, CKPT_MATCH_MISSING), "");
    CHECK_EQ_INT(ckpt_match_count(r, CKPT_MATCH_TIED), 1);
    const ckpt_match_item *t = ckpt_match_item_at(r, CKPT_MATCH_TIED, 0);
    CHECK(t && strcmp(t->name, "lm_head.weight") == 0 && strcmp(t->tied_to, "embed.weight") == 0);
    CHECK(t && t->expected && t->checkpoint &&
          strcmp(t->checkpoint->name, "module.embed.weight") == 0);
    CHECK_EQ_INT(ckpt_match_matched(r), 1);
    ckpt_match_result_free(r);
    ckpt_manifest_free(c);
    ckpt_manifest_free(e);
    /* not allowed: incomplete, the key missing and the declared tie named */
    const char *plain = "{\"tensors\":[{\"name\":\"embed.weight\",\"dtype\":\"F32\","
                        "\"shape\":[4,2]}],\"metadata\":{\"lm_head.weight\":\"embed.weight\"}}";
    CHECK_EQ_INT(ckpt_manifest_parse(&c, plain, strlen(plain), "c", NULL), 0);
    CHECK_EQ_INT(ckpt_manifest_parse(&e, spec, strlen(spec), "e", NULL), 0);
    CHECK_EQ_INT(ckpt_match(&r, c, e, NULL), 0);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    CHECK_EQ_STR(names(r, CKPT_MATCH_MISSING), "lm_head.weight");
    CHECK_EQ_STR(names(r, CKPT_MATCH_TIED), "lm_head.weight");
    ckpt_match_result_free(r);
    ckpt_manifest_free(e);
    /* the model ties them: filled through its tie, the alias aside */
    const char *tied = "{\"tensors\":[{\"name\":\"embed.weight\",\"dtype\":\"F32\","
                       "\"shape\":[4,2]},{\"name\":\"lm_head.weight\",\"dtype\":\"F32\","
                       "\"shape\":[4,2]}],\"ties\":[[\"embed.weight\",\"lm_head.weight\"]]}";
    CHECK_EQ_INT(ckpt_manifest_parse(&e, tied, strlen(tied), "e", NULL), 0);
    CHECK_EQ_INT(ckpt_match(&r, c, e, NULL), 0);
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK_EQ_STR(names(r, CKPT_MATCH_MISSING), "");
    t = ckpt_match_count(r, CKPT_MATCH_TIED) == 1 ? ckpt_match_item_at(r, CKPT_MATCH_TIED, 0)
                                                  : NULL;
    CHECK(t && t->expected && !t->checkpoint && strcmp(t->tied_to, "embed.weight") == 0);
    ckpt_match_result_free(r);
    ckpt_manifest_free(e);
    ckpt_manifest_free(c);
}

TEST(empty_sets) {
    const char *none[] = {NULL};
    ckpt_match_result *r = match(none, none, NULL);
    CHECK_EQ_INT(ckpt_match_complete(r), 1);
    CHECK(ckpt_match_warning(r) == NULL);
    done(r);
    r = match(MODEL, none, NULL);
    CHECK_EQ_INT(ckpt_match_complete(r), 0);
    CHECK_EQ_INT(ckpt_match_count(r, CKPT_MATCH_UNEXPECTED), 4);
    done(r);
}

/* ------------------------------------------------------------ property */

static uint64_t rng_state = 0x2545f4914f6cdd1du;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* Segment names, including wrapper and prefix names used as ordinary
 * segments. */
static const char *const SEGS[] = {"fc1",        "fc2",    "weight",  "bias",         "0",
                                   "1",          "layers", "encoder", "module",       "model",
                                   "state_dict", "attn",   "norm",    "running_mean", "_orig_mod",
                                   "x",          "head",   "embed"};
static const char *const WRAPS[] = {
    "module.", "_orig_mod.", "model.", "state_dict.", "_fsdp_wrapped_module.", "net.", "backbone."};

TEST(property_normalize_restores_or_applies_nothing) {
    enum { ITER = 3000 };
    char *orig[40], *wrapped[40];
    int applied = 0, nothing = 0, bad = 0;
    for (int it = 0; it < ITER; it++) {
        size_t n = 1 + rnd(30), k = 0;
        ckpt_manifest *e = NULL, *c = NULL;
        ckpt_manifest_new(&e, "e");
        ckpt_manifest_new(&c, "c");
        /* distinct random keys of 1-4 segments */
        for (size_t tries = 0; k < n && tries < 200; tries++) {
            char key[256] = "";
            size_t segs = 1 + rnd(4);
            for (size_t s = 0; s < segs; s++) {
                strcat(key, SEGS[rnd(sizeof SEGS / sizeof *SEGS)]);
                if (s + 1 < segs) strcat(key, ".");
            }
            uint64_t dim = k + 1;
            if (ckpt_manifest_add(e, key, "F32", 1, &dim) == 0) orig[k++] = strdup(key);
        }
        n = k;
        /* one stack of prefixes for all keys, and sometimes a wrapper
         * segment inserted mid-key */
        char stack[256] = "";
        size_t depth = rnd(4);
        for (size_t d = 0; d < depth; d++) strcat(stack, WRAPS[rnd(sizeof WRAPS / sizeof *WRAPS)]);
        int mid = rnd(4) == 0;
        int dup = 0;
        for (size_t i = 0; i < n; i++) {
            char key[512];
            const char *dot = strchr(orig[i], '.');
            if (mid && dot && rnd(2))
                snprintf(key, sizeof key, "%s%.*s._orig_mod.%s", stack, (int)(dot - orig[i]),
                         orig[i], dot + 1);
            else
                snprintf(key, sizeof key, "%s%s", stack, orig[i]);
            uint64_t dim = i + 1;
            if (ckpt_manifest_add(c, key, "F32", 1, &dim) != 0) dup = 1;
            wrapped[i] = strdup(key);
        }
        ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
        o.normalize = 1;
        ckpt_match_result *r = NULL;
        if (!dup && ckpt_match(&r, c, e, &o) == 0) {
            const ckpt_rewrite *rw = ckpt_match_rewrite(r);
            if (rw && rw->applied) {
                /* applied: every key is back to exactly its original */
                int ok = ckpt_match_complete(r) && ckpt_match_matched(r) == n;
                for (size_t i = 0; i < n && ok; i++)
                    ok = strcmp(ckpt_match_rewritten(r, i), orig[i]) == 0;
                if (!ok) {
                    bad++;
                    fprintf(stderr, "  restored wrongly with %s: %s -> %s\n", rw->description,
                            wrapped[0], ckpt_match_rewritten(r, 0));
                }
                applied++;
            } else {
                /* applied nothing: the lists are the keys as they are (a
                 * wrapped key may equal another original key by chance; the
                 * shapes then differ) */
                size_t same = 0, named = 0;
                for (size_t i = 0; i < n; i++) {
                    same += strcmp(wrapped[i], orig[i]) == 0;
                    named += ckpt_manifest_find(e, wrapped[i]) != NULL;
                }
                int ok = ckpt_match_matched(r) == same &&
                         ckpt_match_count(r, CKPT_MATCH_UNEXPECTED) == n - named;
                if (!ok) {
                    bad++;
                    fprintf(stderr, "  unapplied but lists changed: %s\n", wrapped[0]);
                }
                nothing++;
            }
            ckpt_match_result_free(r);
        }
        for (size_t i = 0; i < n; i++) {
            free(orig[i]);
            free(wrapped[i]);
        }
        ckpt_manifest_free(c);
        ckpt_manifest_free(e);
    }
    printf("property: %d applied, %d applied nothing, %d wrong\n", applied, nothing, bad);
    CHECK_EQ_INT(bad, 0);
    /* the generator must exercise both outcomes */
    CHECK(applied > ITER / 4);
    CHECK(nothing > ITER / 20);
}

/* Random training checkpoints: the model's keys under a random entry name
 * beside 1-3 other random top-level entries (optimizer state, EMA-like
 * copies of part of the model, counters). --normalize applies "strip
 * 'ENTRY.'" exactly when the model entry is the only one holding the
 * model, restores every key, and names the other entries as ignored. */
TEST(property_training_subtree) {
    static const char *const ENTRIES[] = {"model", "net",       "state_dict", "module", "optimizer",
                                          "ema",   "scheduler", "scaler",     "trainer"};
    enum { ITER = 1500, NE = sizeof ENTRIES / sizeof *ENTRIES };
    int applied = 0, refused = 0, bad = 0;
    for (int it = 0; it < ITER; it++) {
        ckpt_manifest *e = NULL, *c = NULL;
        ckpt_manifest_new(&e, "e");
        ckpt_manifest_new(&c, "c");
        char *orig[40];
        size_t n = 0;
        for (size_t tries = 0, want = 1 + rnd(20); n < want && tries < 200; tries++) {
            char key[256] = "";
            for (size_t s = 0, segs = 1 + rnd(3); s < segs; s++) {
                strcat(key, SEGS[rnd(sizeof SEGS / sizeof *SEGS)]);
                if (s + 1 < segs) strcat(key, ".");
            }
            uint64_t dim = n + 1;
            if (ckpt_manifest_add(e, key, "F32", 1, &dim) == 0) orig[n++] = strdup(key);
        }
        size_t model = rnd(NE), nothers = 1 + rnd(3), others[3], total = n;
        int twin = 0; /* another entry holds every model key (and maybe more):
                         its rewrite may match as many, a tie */
        char key[512];
        for (size_t i = 0; i < n; i++) {
            uint64_t dim = i + 1;
            snprintf(key, sizeof key, "%s.%s", ENTRIES[model], orig[i]);
            ckpt_manifest_add(c, key, "F32", 1, &dim);
        }
        for (size_t k = 0; k < nothers; k++) {
            int fresh;
            do { /* distinct entries */
                others[k] = rnd(NE);
                fresh = others[k] != model;
                for (size_t q = 0; q < k; q++) fresh &= others[k] != others[q];
            } while (!fresh);
            /* its own keys, some of them model keys, sometimes all */
            int all = rnd(4) == 0;
            size_t m = all ? n : 1 + rnd(2 * (uint32_t)n + 2), held = 0;
            unsigned char seen[40] = {0};
            for (size_t i = 0; i < m; i++) {
                uint64_t dim = i + 1;
                if (all || rnd(2)) {
                    snprintf(key, sizeof key, "%s.%s", ENTRIES[others[k]], orig[i % n]);
                    held += !seen[i % n];
                    seen[i % n] = 1;
                } else {
                    snprintf(key, sizeof key, "%s.state.%zu.x", ENTRIES[others[k]], i);
                }
                if (ckpt_manifest_add(c, key, "F32", 1, &dim) == 0) total++;
            }
            twin |= held == n;
        }
        ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
        o.normalize = 1;
        ckpt_match_result *r = NULL;
        CHECK_EQ_INT(ckpt_match(&r, c, e, &o), 0);
        const ckpt_rewrite *rw = r ? ckpt_match_rewrite(r) : NULL;
        if (r && rw && rw->applied) {
            char want[64];
            snprintf(want, sizeof want, "strip '%s.'", ENTRIES[model]);
            int ok = ckpt_match_complete(r) && ckpt_match_matched(r) == n &&
                     strncmp(rw->description, want, strlen(want)) == 0;
            for (size_t i = 0; ok && i < n; i++)
                ok = strcmp(ckpt_match_rewritten(r, i), orig[i]) == 0; /* sorted alike */
            /* every other entry named once, sorted, nothing else */
            for (size_t k = 0; ok && k < nothers; k++) {
                int found = 0;
                for (size_t i = 0; i < ckpt_match_ignored_count(r); i++)
                    found |= strcmp(ckpt_match_ignored(r, i), ENTRIES[others[k]]) == 0;
                ok = found;
            }
            for (size_t i = 1; ok && i < ckpt_match_ignored_count(r); i++)
                ok = strcmp(ckpt_match_ignored(r, i - 1), ckpt_match_ignored(r, i)) < 0;
            if (!ok) {
                bad++;
                fprintf(stderr, "  wrong subtree rewrite %s (model %s)\n", rw->description,
                        ENTRIES[model]);
            }
            applied++;
        } else if (r) {
            /* applied nothing: only a twin entry excuses it (the model entry is
             * selected whatever its share of the keys) */
            if (!twin) {
                bad++;
                fprintf(stderr, "  no rewrite for model '%s' (%zu keys of %zu)\n", ENTRIES[model],
                        n, total);
                for (size_t q = 0; q < ckpt_match_candidate_count(r); q++)
                    fprintf(stderr, "    cand %s %llu\n", ckpt_match_candidate(r, q)->description,
                            (unsigned long long)ckpt_match_candidate(r, q)->matches);
            }
            refused++;
        }
        ckpt_match_result_free(r);
        for (size_t i = 0; i < n; i++) free(orig[i]);
        ckpt_manifest_free(c);
        ckpt_manifest_free(e);
    }
    printf("training property: %d applied, %d applied nothing, %d wrong\n", applied, refused, bad);
    CHECK_EQ_INT(bad, 0);
    CHECK(applied > ITER / 3);
    CHECK(refused > ITER / 20);
}

/* ------------------------------------------------------------ diff */

/* A safetensors file in memory: header JSON + data. */
static unsigned char *st_file(const char *header, const void *data, size_t dlen, size_t *len) {
    size_t h = strlen(header);
    unsigned char *p = malloc(8 + h + dlen);
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(p + 8, header, h);
    memcpy(p + 8 + h, data, dlen);
    *len = 8 + h + dlen;
    return p;
}

/* A manifest built key by key (a loaded object) takes a file's metadata,
 * copied: its aliases declare the tie as the file's own manifest does. */
TEST(set_metadata) {
    const char *h = "{\"__metadata__\":{\"lm_head.weight\":\"embed.weight\"},\"embed.weight\":"
                    "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    float data[2] = {1, 2};
    size_t n;
    unsigned char *p = st_file(h, data, sizeof data, &n);
    ckpt_file *f = NULL;
    ckpt_manifest *c = NULL, *e = NULL;
    CHECK_EQ_INT(ckpt_open_memory(&f, p, n, "c", NULL), 0);
    CHECK_EQ_INT(ckpt_manifest_new(&c, "c"), 0);
    CHECK_EQ_INT(ckpt_manifest_add(c, "embed.weight", "F32", 1, (const uint64_t[]){2}), 0);
    CHECK_EQ_INT(ckpt_manifest_set_metadata(c, f), 0);
    CHECK_EQ_INT(ckpt_manifest_set_metadata(c, NULL), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_manifest_set_metadata(NULL, f), CKPT_E_INVALID_ARG);
    ckpt_close(f);
    free(p);
    CHECK_EQ_INT(ckpt_manifest_new(&e, "e"), 0);
    CHECK_EQ_INT(ckpt_manifest_add(e, "embed.weight", "F32", 1, (const uint64_t[]){2}), 0);
    CHECK_EQ_INT(ckpt_manifest_add(e, "lm_head.weight", "F32", 1, (const uint64_t[]){2}), 0);
    ckpt_match_result *r = NULL;
    CHECK_EQ_INT(ckpt_match(&r, c, e, NULL), 0);
    CHECK_EQ_STR(names(r, CKPT_MATCH_MISSING), "lm_head.weight");
    CHECK_EQ_STR(names(r, CKPT_MATCH_TIED), "lm_head.weight");
    ckpt_match_result_free(r);
    ckpt_manifest_free(c);
    ckpt_manifest_free(e);
}

typedef struct pairfiles {
    unsigned char *pa, *pb;
    ckpt_file *fa, *fb;
    ckpt_manifest *ma, *mb;
} pairfiles;

static void open_pair(pairfiles *p, const char *ha, const void *da, size_t la, const char *hb,
                      const void *db, size_t lb) {
    size_t na, nb;
    p->pa = st_file(ha, da, la, &na);
    p->pb = st_file(hb, db, lb, &nb);
    CHECK_EQ_INT(ckpt_open_memory(&p->fa, p->pa, na, "a", NULL), 0);
    CHECK_EQ_INT(ckpt_open_memory(&p->fb, p->pb, nb, "b", NULL), 0);
    CHECK_EQ_INT(ckpt_manifest_from_file(&p->ma, p->fa), 0);
    CHECK_EQ_INT(ckpt_manifest_from_file(&p->mb, p->fb), 0);
}

static void close_pair(pairfiles *p) {
    ckpt_manifest_free(p->ma);
    ckpt_manifest_free(p->mb);
    ckpt_close(p->fa);
    ckpt_close(p->fb);
    free(p->pa);
    free(p->pb);
}

/* The first difference in a later window: counted from there, with the
 * NaN/Inf of the equal windows before it counted too (read again). */
TEST(diff_first_difference_late) {
    size_t n = 3u << 20; /* three 4 MiB windows of F32 */
    float *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
    a[5] = b[5] = NAN;
    a[100] = b[100] = -INFINITY;
    a[2900000] = b[2900000] = NAN;
    a[2500000] = 1.0f;
    b[2500000] = 1.5f;
    char h[128];
    snprintf(h, sizeof h, "{\"w\":{\"dtype\":\"F32\",\"shape\":[%zu],\"data_offsets\":[0,%zu]}}", n,
             n * sizeof *a);
    pairfiles p = {0};
    open_pair(&p, h, a, n * sizeof *a, h, b, n * sizeof *b);
    ckpt_diff_result *r = NULL;
    CHECK_EQ_INT(ckpt_diff(&r, p.ma, p.mb, NULL), 0);
    CHECK_EQ_INT(ckpt_diff_tensor_count(r), 1);
    const ckpt_tensor_diff *d = ckpt_diff_tensor(r, 0);
    CHECK_EQ_INT(d->compared, 1);
    CHECK_EQ_INT(d->differing, 1);
    CHECK(d->max_abs_diff == 0.5);
    CHECK_EQ_INT(d->nan_a, 2);
    CHECK_EQ_INT(d->nan_b, 2);
    CHECK_EQ_INT(d->inf_a, 1);
    CHECK_EQ_INT(d->inf_b, 1);
    CHECK_EQ_INT(d->nonfinite_mismatch, 0);
    ckpt_diff_result_free(r);
    close_pair(&p);
    free(a);
    free(b);
}

TEST(diff_f32_values) {
    float a[6] = {1.0f, 2.0f, NAN, INFINITY, 0.0f, 5.0f};
    float b[6] = {1.0f, 2.5f, NAN, 1.0f, -0.0f, 5.0f};
    const char *h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
    pairfiles p = {0};
    open_pair(&p, h, a, sizeof a, h, b, sizeof b);
    ckpt_diff_result *r = NULL;
    CHECK_EQ_INT(ckpt_diff(&r, p.ma, p.mb, NULL), 0);
    CHECK_EQ_INT(ckpt_diff_identical(r), 0);
    CHECK_EQ_INT(ckpt_diff_tensor_count(r), 1);
    const ckpt_tensor_diff *d = ckpt_diff_tensor(r, 0);
    CHECK_EQ_INT(d->bitwise_equal, 0);
    CHECK_EQ_INT(d->compared, 1);
    CHECK_EQ_INT(d->numel, 6);
    CHECK_EQ_INT(d->differing, 2); /* 2 vs 2.5 and inf vs 1; NaN = NaN, 0 = -0 */
    CHECK(isinf(d->max_abs_diff));
    CHECK(isinf(d->max_rel_diff));
    CHECK_EQ_INT(d->nan_a, 1);
    CHECK_EQ_INT(d->nan_b, 1);
    CHECK_EQ_INT(d->inf_a, 1);
    CHECK_EQ_INT(d->inf_b, 0);
    CHECK_EQ_INT(d->nonfinite_mismatch, 1);
    CHECK_EQ_INT(d->npositions, 1);
    CHECK_EQ_INT(d->positions[0], 3);
    ckpt_diff_result_free(r);
    close_pair(&p);

    /* finite differences and tolerances */
    float c[3] = {1.0f, 2.0f, 4.0f}, e[3] = {1.0f, 2.02f, 4.0f};
    const char *h3 = "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}";
    open_pair(&p, h3, c, sizeof c, h3, e, sizeof e);
    CHECK_EQ_INT(ckpt_diff(&r, p.ma, p.mb, NULL), 0);
    d = ckpt_diff_tensor(r, 0);
    CHECK_EQ_INT(d->differing, 1);
    CHECK(fabs(d->max_abs_diff - (double)(2.02f - 2.0f)) < 1e-12);
    CHECK(fabs(d->max_rel_diff - (double)(2.02f - 2.0f) / (double)2.02f) < 1e-12);
    ckpt_diff_result_free(r);
    ckpt_diff_options o = CKPT_DIFF_OPTIONS_INIT;
    o.atol = 0.03;
    CHECK_EQ_INT(ckpt_diff(&r, p.ma, p.mb, &o), 0);
    CHECK_EQ_INT(ckpt_diff_identical(r), 1);
    CHECK_EQ_INT(ckpt_diff_tensor(r, 0)->differing, 0);
    ckpt_diff_result_free(r);
    o.atol = 0;
    o.rtol = 0.005; /* 0.02 > 0.005 * 2.02 */
    CHECK_EQ_INT(ckpt_diff(&r, p.ma, p.mb, &o), 0);
    CHECK_EQ_INT(ckpt_diff_identical(r), 0);
    ckpt_diff_result_free(r);
    o.rtol = -1;
    CHECK_EQ_INT(ckpt_diff(&r, p.ma, p.mb, &o), CKPT_E_INVALID_ARG);
    close_pair(&p);
}

/* exclude: what its globs name is in no list, count or verdict, on
 * either side; keys_only too. */
TEST(diff_exclude) {
    float a[3] = {1.0f, 2.0f, 3.0f}, b[3] = {1.0f, 9.0f, 3.0f};
    const char *ha = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"opt.m\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                     "\"opt.v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
    const char *hb = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"opt.m\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                     "\"extra\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
    pairfiles p = {0};
    open_pair(&p, ha, a, sizeof a, hb, b, sizeof b);
    ckpt_diff_result *r = NULL;
    CHECK_EQ_INT(ckpt_diff(&r, p.ma, p.mb, NULL), 0);
    CHECK_EQ_INT(ckpt_diff_identical(r), 0);
    CHECK_EQ_INT(ckpt_diff_tensor_count(r), 1); /* opt.m: 2 vs 9 */
    ckpt_diff_result_free(r);
    ckpt_diff_options o = CKPT_DIFF_OPTIONS_INIT;
    const char *ex[] = {"opt.*", "extra"};
    o.exclude = ex;
    o.nexclude = 2;
    CHECK_EQ_INT(ckpt_diff(&r, p.ma, p.mb, &o), 0);
    CHECK_EQ_INT(ckpt_diff_identical(r), 1);
    CHECK_EQ_INT(ckpt_diff_tensor_count(r), 0);
    CHECK_EQ_INT(ckpt_diff_equal_count(r), 1);
    CHECK_EQ_INT(ckpt_diff_count(r, CKPT_DIFF_ONLY_IN_A), 0);
    CHECK_EQ_INT(ckpt_diff_count(r, CKPT_DIFF_ONLY_IN_B), 0);
    ckpt_diff_result_free(r);
    o.nexclude = 1; /* "extra" stays: only in B */
    o.keys_only = 1;
    CHECK_EQ_INT(ckpt_diff(&r, p.ma, p.mb, &o), 0);
    CHECK_EQ_INT(ckpt_diff_identical(r), 0);
    CHECK_EQ_INT(ckpt_diff_count(r, CKPT_DIFF_ONLY_IN_A), 0);
    CHECK_EQ_STR(ckpt_diff_name(r, CKPT_DIFF_ONLY_IN_B, 0), "extra");
    ckpt_diff_result_free(r);
    o.exclude = NULL;
    CHECK_EQ_INT(ckpt_diff(&r, p.ma, p.mb, &o), CKPT_E_INVALID_ARG);
    close_pair(&p);
}

/* Same 16-bit float dtype, values compared as floats: BF16 1.0 vs 1.5
 * and 2.0 vs 2.015625, F16 1.0 vs 1.5 and 65504 (max) vs -65504. */
TEST(diff_bf16_f16_same_dtype) {
    uint16_t bfa[3] = {0x3f80, 0x4000, 0x0000}, bfb[3] = {0x3fc0, 0x4001, 0x8000};
    const char *hbf = "{\"w\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]}}";
    pairfiles p = {0};
    open_pair(&p, hbf, bfa, sizeof bfa, hbf, bfb, sizeof bfb);
    ckpt_diff_options o = CKPT_DIFF_OPTIONS_INIT;
    o.atol = 0.02;
    ckpt_diff_result *r = NULL;
    CHECK_EQ_INT(ckpt_diff(&r, p.ma, p.mb, &o), 0);
    const ckpt_tensor_diff *d = ckpt_diff_tensor(r, 0);
    CHECK_EQ_INT(d->compared, 1);
    CHECK_EQ_INT(d->differing, 1); /* 2.015625 is within atol; 0 = -0 */
    CHECK(d->max_abs_diff == 0.5);
    CHECK(d->max_rel_diff == 0.5 / 1.5);
    ckpt_diff_result_free(r);
    close_pair(&p);
    uint16_t ha[2] = {0x3c00, 0x7bff}, hb[2] = {0x3e00, 0xfbff};
    const char *hhf = "{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}";
    open_pair(&p, hhf, ha, sizeof ha, hhf, hb, sizeof hb);
    CHECK_EQ_INT(ckpt_diff(&r, p.ma, p.mb, NULL), 0);
    d = ckpt_diff_tensor(r, 0);
    CHECK_EQ_INT(d->differing, 2);
    CHECK(d->max_abs_diff == 131008.0);
    CHECK(d->max_rel_diff == 2.0);
    CHECK_EQ_INT(d->nan_a + d->nan_b + d->inf_a + d->inf_b, 0);
    ckpt_diff_result_free(r);
    close_pair(&p);
}

/* BF16 against F32, F16 and F8 widened: equal values, different dtypes. */
TEST(diff_widths) {
    /* 1.5, -2, 0.25 */
    uint16_t bf[3] = {0x3fc0, 0xc000, 0x3e80};
    uint16_t hf[3] = {0x3e00, 0xc000, 0x3400};
    float f[3] = {1.5f, -2.0f, 0.25f};
    uint8_t e4[3] = {0x3c, 0xc0, 0x28}; /* E4M3: bias 7 */
    uint8_t e5[3] = {0x3e, 0xc0, 0x34}; /* E5M2: bias 15 */
    const char *hbf = "{\"w\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]}}";
    const char *hhf = "{\"w\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]}}";
    const char *hf32 = "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}";
    const char *he4 = "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[3],\"data_offsets\":[0,3]}}";
    const char *he5 = "{\"w\":{\"dtype\":\"F8_E5M2\",\"shape\":[3],\"data_offsets\":[0,3]}}";
    struct {
        const char *h;
        const void *d;
        size_t n;
    } v[] = {{hbf, bf, 6}, {hhf, hf, 6}, {he4, e4, 3}, {he5, e5, 3}};
    for (size_t i = 0; i < 4; i++) {
        pairfiles p = {0};
        ckpt_diff_result *r = NULL;
        open_pair(&p, hf32, f, sizeof f, v[i].h, v[i].d, v[i].n);
        CHECK_EQ_INT(ckpt_diff(&r, p.ma, p.mb, NULL), 0);
        CHECK_EQ_INT(ckpt_diff_count(r, CKPT_DIFF_DTYPE_MISMATCH), 1);
        CHECK_EQ_INT(ckpt_diff_identical(r), 0); /* the dtype differs */
        const ckpt_tensor_diff *d = ckpt_diff_tensor(r, 0);
        CHECK(d && d->compared && d->differing == 0 && d->max_abs_diff == 0);
        if (d && d->differing) fprintf(stderr, "  width case %zu differs\n", i);
        ckpt_diff_result_free(r);
        close_pair(&p);
    }
}

TEST(diff_keys_and_ints) {
    int64_t a[5] = {(int64_t)1 << 60, 7, 1, 2, 3}, b[5] = {((int64_t)1 << 60) + 1, 7, 1, 2, 3};
    const char *ha = "{\"i\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
                     "\"only_a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[16,24]},"
                     "\"s\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[24,40]}}";
    const char *hb = "{\"i\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
                     "\"only_b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[16,24]},"
                     "\"s\":{\"dtype\":\"I64\",\"shape\":[1,2],\"data_offsets\":[24,40]}}";
    pairfiles p = {0};
    open_pair(&p, ha, a, sizeof a, hb, b, sizeof b);
    ckpt_diff_result *r = NULL;
    CHECK_EQ_INT(ckpt_diff(&r, p.ma, p.mb, NULL), 0);
    CHECK_EQ_STR(ckpt_diff_name(r, CKPT_DIFF_ONLY_IN_A, 0), "only_a");
    CHECK_EQ_STR(ckpt_diff_name(r, CKPT_DIFF_ONLY_IN_B, 0), "only_b");
    CHECK_EQ_STR(ckpt_diff_name(r, CKPT_DIFF_SHAPE_MISMATCH, 0), "s");
    CHECK_EQ_INT(ckpt_diff_tensor_count(r), 1);
    /* 2^60 and 2^60 + 1 are one double apart from nothing: still differ */
    CHECK_EQ_INT(ckpt_diff_tensor(r, 0)->differing, 1);
    CHECK_EQ_INT(ckpt_diff_equal_count(r), 0);
    ckpt_diff_result_free(r);
    ckpt_diff_options o = CKPT_DIFF_OPTIONS_INIT;
    o.keys_only = 1;
    CHECK_EQ_INT(ckpt_diff(&r, p.ma, p.mb, &o), 0);
    CHECK_EQ_INT(ckpt_diff_tensor_count(r), 0);
    CHECK_EQ_INT(ckpt_diff_identical(r), 0);
    ckpt_diff_result_free(r);
    close_pair(&p);

    /* values need files */
    ckpt_manifest *m = manifest_of(MODEL);
    CHECK_EQ_INT(ckpt_diff(&r, m, m, NULL), CKPT_E_INVALID_ARG);
    o.keys_only = 1;
    CHECK_EQ_INT(ckpt_diff(&r, m, m, &o), 0);
    CHECK_EQ_INT(ckpt_diff_identical(r), 1);
    ckpt_diff_result_free(r);
    ckpt_manifest_free(m);
}

/* ------------------------------------------------------------ diff: leaves */

/* A protocol-2 pickle of one dict, written op by op. */
typedef struct pk {
    unsigned char b[2048];
    size_t n;
} pk;

static void pk_put(pk *p, const void *s, size_t n) {
    memcpy(p->b + p->n, s, n);
    p->n += n;
}
static void pk_raw(pk *p, const char *s) { pk_put(p, s, strlen(s)); }
static void pk_le32(pk *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p->b[p->n++] = (unsigned char)(v >> (8 * i));
}
static void pk_str(pk *p, const char *s) { /* BINUNICODE */
    pk_put(p, "X", 1);
    pk_le32(p, (uint32_t)strlen(s));
    pk_put(p, s, strlen(s));
}
static void pk_int(pk *p, int32_t v) { /* BININT */
    pk_put(p, "J", 1);
    pk_le32(p, (uint32_t)v);
}
static void pk_float(pk *p, double d) { /* BINFLOAT: big-endian */
    uint64_t u;
    memcpy(&u, &d, 8);
    pk_put(p, "G", 1);
    for (int i = 7; i >= 0; i--) p->b[p->n++] = (unsigned char)(u >> (8 * i));
}
static void pk_bigint(pk *p, unsigned low) { /* LONG1: 2^78 + low */
    unsigned char le[10] = {(unsigned char)low, 0, 0, 0, 0, 0, 0, 0, 0, 0x40};
    pk_put(p, "\x8a\x0a", 2);
    pk_put(p, le, sizeof le);
}

static ckpt_file *open_pickle(const pk *p, const char *name) {
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open_memory(&f, p->b, p->n, name, NULL), 0);
    return f;
}

/* "name:a|b" of a value list (a or b "-" when absent). */
static const char *vnames(const ckpt_diff_result *r, ckpt_diff_value_list l) {
    static char buf[1024];
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < ckpt_diff_value_count(r, l); i++)
        used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s", i ? "," : "",
                                 ckpt_diff_value(r, l, i)->name);
    return buf;
}

/* Non-tensor leaves of two checkpoints: every kind, by name. */
TEST(diff_leaves) {
    pk a = {{0}, 0}, b = {{0}, 0};
    pk *both[2] = {&a, &b};
    for (int k = 0; k < 2; k++) {
        pk *p = both[k];
        pk_raw(p, "\x80\x02}(");
        pk_str(p, "epoch"), pk_int(p, k ? 7 : 2);
        pk_str(p, "lr"), pk_float(p, k ? 0.001 * (1 + 1e-9) : 0.001);
        pk_str(p, "big"), pk_bigint(p, (unsigned)k); /* beyond 2^64 */
        pk_str(p, "same_big"), pk_bigint(p, 5);
        pk_str(p, "wd"), k ? pk_float(p, 0.0) : pk_int(p, 0); /* kinds differ */
        pk_str(p, "flag"), pk_raw(p, k ? "\x88" : "\x89");
        pk_str(p, "name"), pk_str(p, "adam");
        pk_str(p, "none"), pk_raw(p, "N");
        pk_str(p, "nan"), pk_float(p, NAN);
        pk_str(p, "inf"), pk_float(p, INFINITY);
        pk_str(p, "zero"), pk_float(p, k ? -0.0 : 0.0);
        pk_str(p, "raw"), pk_raw(p, k ? "C\x02\x01\x03" : "C\x02\x01\x02");
        pk_str(p, "obj"), pk_raw(p, k ? "cmymod\nOther\n)R" : "cmymod\nThing\n)R");
        pk_str(p, "dtype"), pk_raw(p, k ? "ctorch\nfloat32\n" : "ctorch\nfloat\n");
        pk_str(p, k ? "only_b" : "only_a"), pk_int(p, 1);
        pk_raw(p, "u.");
    }
    ckpt_file *fa = open_pickle(&a, "a"), *fb = open_pickle(&b, "b");
    ckpt_manifest *ma = NULL, *mb = NULL;
    CHECK_EQ_INT(ckpt_manifest_from_file(&ma, fa), 0);
    CHECK_EQ_INT(ckpt_manifest_from_file(&mb, fb), 0);
    ckpt_diff_result *r = NULL;
    CHECK_EQ_INT(ckpt_diff(&r, ma, mb, NULL), 0);
    CHECK_EQ_INT(ckpt_diff_identical(r), 0);
    CHECK_EQ_INT(ckpt_diff_equal_count(r), 0);
    CHECK_EQ_STR(vnames(r, CKPT_DIFF_VALUES_DIFFERING), "big,epoch,flag,lr,obj,raw,wd");
    CHECK_EQ_STR(vnames(r, CKPT_DIFF_VALUES_ONLY_IN_A), "only_a");
    CHECK_EQ_STR(vnames(r, CKPT_DIFF_VALUES_ONLY_IN_B), "only_b");
    /* dtype (torch.float is torch.float32), inf, name, nan, none,
     * same_big, zero (0.0 and -0.0) */
    CHECK_EQ_INT(ckpt_diff_values_equal(r), 7);
    const ckpt_value_diff *v = ckpt_diff_value(r, CKPT_DIFF_VALUES_DIFFERING, 1);
    int64_t x = 0, y = 0;
    CHECK(v && ckpt_value_int(v->a, &x) == 0 && ckpt_value_int(v->b, &y) == 0 && x == 2 && y == 7);
    v = ckpt_diff_value(r, CKPT_DIFF_VALUES_ONLY_IN_A, 0);
    CHECK(v && v->a && !v->b);
    v = ckpt_diff_value(r, CKPT_DIFF_VALUES_DIFFERING, 6); /* wd: int against float */
    CHECK(v && ckpt_value_kind(v->a) == CKPT_KIND_INT && ckpt_value_kind(v->b) == CKPT_KIND_FLOAT);
    CHECK(ckpt_diff_value(r, CKPT_DIFF_VALUES_DIFFERING, 7) == NULL);
    ckpt_diff_result_free(r);

    /* the float tolerance applies to values too */
    ckpt_diff_options o = CKPT_DIFF_OPTIONS_INIT;
    o.rtol = 1e-6;
    CHECK_EQ_INT(ckpt_diff(&r, ma, mb, &o), 0);
    CHECK_EQ_STR(vnames(r, CKPT_DIFF_VALUES_DIFFERING), "big,epoch,flag,obj,raw,wd");
    ckpt_diff_result_free(r);
    /* keys only: no values */
    o.keys_only = 1;
    CHECK_EQ_INT(ckpt_diff(&r, ma, mb, &o), 0);
    CHECK_EQ_INT(ckpt_diff_identical(r), 1);
    CHECK_EQ_INT(ckpt_diff_value_count(r, CKPT_DIFF_VALUES_DIFFERING), 0);
    ckpt_diff_result_free(r);
    /* a file against itself */
    CHECK_EQ_INT(ckpt_diff(&r, ma, ma, NULL), 0);
    CHECK_EQ_INT(ckpt_diff_identical(r), 1);
    CHECK_EQ_INT(ckpt_diff_values_equal(r), 15);
    ckpt_diff_result_free(r);
    ckpt_manifest_free(ma);
    ckpt_manifest_free(mb);
    ckpt_close(fa);
    ckpt_close(fb);
}

/* A ckpt-written safetensors file is compared as the tree it records:
 * nesting, values and a complex tensor (stored as F64 [..., 2]). */
static char tmpdir[64] = "/tmp/ckpt-test-match-XXXXXX";

static const char *tpath(const char *name) {
    static char ring[4][256];
    static unsigned slot;
    char *p = ring[slot++ % 4];
    snprintf(p, 256, "%s/%s", tmpdir, name);
    return p;
}

static void write_training(const char *name, ckpt_format fmt, int64_t epoch) {
    static const double c128[4] = {1.0, -2.0, 0.5, 3.0};
    static const float w[2] = {1.5f, -1.0f};
    ckpt_tree *t = NULL;
    ckpt_value *root, *model, *v, *k;
    uint64_t two = 2;
    CHECK_EQ_INT(ckpt_tree_new(&t), 0);
    ckpt_tree_dict(&root, t);
    ckpt_tree_dict(&model, t);
    ckpt_tree_str(&k, t, "w", 1), ckpt_tree_tensor(&v, t, CKPT_DT_F32, 1, &two, w, sizeof w);
    ckpt_tree_set(t, model, k, v);
    ckpt_tree_str(&k, t, "c", 1), ckpt_tree_tensor(&v, t, CKPT_DT_C128, 1, &two, c128, sizeof c128);
    ckpt_tree_set(t, model, k, v);
    ckpt_tree_str(&k, t, "model", 5), ckpt_tree_set(t, root, k, model);
    ckpt_tree_str(&k, t, "epoch", 5), ckpt_tree_int(&v, t, epoch), ckpt_tree_set(t, root, k, v);
    ckpt_tree_str(&k, t, "lr", 2), ckpt_tree_float(&v, t, 0.001), ckpt_tree_set(t, root, k, v);
    CHECK_EQ_INT(ckpt_tree_write(root, tpath(name), fmt, NULL), 0);
    ckpt_tree_free(t);
}

static ckpt_manifest *load(const char *name) {
    ckpt_manifest *m = NULL;
    CHECK_EQ_INT(ckpt_manifest_load(&m, tpath(name), NULL), 0);
    return m;
}

static void put_file(const char *name, const void *p, size_t n) {
    FILE *fp = fopen(tpath(name), "wb");
    CHECK(fp && fwrite(p, 1, n, fp) == n);
    if (fp) fclose(fp);
}

/* A manifest's names follow the checkpoint readers' rule
 * (ckpt_walk_name_fits: max_name_bytes counts the NUL), on the one-pass
 * reader and on jansson's (an object key of 64 bytes sends it there), and
 * what ckpt match loads (ckpt_manifest_load, default limits) agrees with
 * the safetensors reader at the limit: 65535 bytes load, 65536 do not. */
TEST(name_limit_agrees) {
    ckpt_limits lim = CKPT_LIMITS_INIT;
    lim.max_name_bytes = 4;
    const char *json[] = {
        "{\"tensors\":[{\"name\":\"abc\",\"dtype\":\"F32\",\"shape\":[]}]}",
        "{\"tensors\":[{\"name\":\"abc\",\"dtype\":\"F32\",\"shape\":[]}],"
        "\"x234567890123456789012345678901234567890123456789012345678901234\":0}",
    };
    for (int k = 0; k < 2; k++) {
        ckpt_manifest *m = NULL;
        CHECK_EQ_INT(ckpt_manifest_parse(&m, json[k], strlen(json[k]), "s", &lim), 0);
        CHECK(m && ckpt_manifest_find(m, "abc") != NULL);
        ckpt_manifest_free(m);
        lim.max_name_bytes = 3; /* exactly "abc": no room for the NUL */
        CHECK_EQ_INT(ckpt_manifest_parse(&m, json[k], strlen(json[k]), "s", &lim), CKPT_E_LIMIT);
        CHECK(m == NULL);
        CHECK(strstr(ckpt_error_last()->message,
                     "tensors[0]: name of 3 bytes: expected at most 2 (max_name_bytes 3") != NULL);
        lim.max_name_bytes = 4;
    }

    const size_t max = ((ckpt_limits)CKPT_LIMITS_INIT).max_name_bytes;
    char *name = malloc(max + 1), *text = malloc(max + 256);
    memset(name, 'n', max);
    for (size_t len = max - 1; len <= max; len++) {
        int want = len < max ? 0 : CKPT_E_LIMIT;
        name[len] = '\0';
        ckpt_manifest *m = NULL;
        size_t n;
        snprintf(text, max + 256,
                 "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", name);
        unsigned char *st = st_file(text, "x", 1, &n);
        put_file("long.safetensors", st, n);
        free(st);
        CHECK_EQ_INT(ckpt_manifest_load(&m, tpath("long.safetensors"), NULL), want);
        if (want) CHECK(strstr(ckpt_error_last()->message, "expected at most 65535") != NULL);
        ckpt_manifest_free(m);
        for (int k = 0; k < 2; k++) {
            snprintf(text, max + 256,
                     "{\"tensors\":[{\"name\":\"%s\",\"dtype\":\"U8\",\"shape\":[1]}]%s}", name,
                     k ? ",\"x234567890123456789012345678901234567890123456789012345678901234\":0"
                       : "");
            put_file("long.json", text, strlen(text));
            m = NULL;
            CHECK_EQ_INT(ckpt_manifest_load(&m, tpath("long.json"), NULL), want);
            if (want)
                CHECK(strstr(ckpt_error_last()->message, "expected at most 65535") != NULL);
            else
                CHECK(m && ckpt_manifest_count(m) == 1 &&
                      strlen(ckpt_manifest_entry_at(m, 0)->name) == len);
            ckpt_manifest_free(m);
        }
        name[len] = 'n';
    }
    free(name);
    free(text);
}

/* ckpt_manifest_load frees the text before it indexes the names: ties
 * (before or after the tensors) are read from their own copy, and what
 * the one pass leaves to jansson (a repeated name, a tie naming no
 * tensor) is read again from the file, with jansson's message. */
TEST(load_frees_text_early) {
    const char *tied[] = {
        "{\"ties\":[[\"a\",\"b\"]],\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[2]},"
        "{\"name\":\"b\",\"dtype\":\"F32\",\"shape\":[2]}]}",
        "{\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[2]},"
        "{\"name\":\"b\",\"dtype\":\"F32\",\"shape\":[2]}],\"ties\":[[\"a\",\"b\"]]}",
    };
    for (int k = 0; k < 2; k++) {
        put_file("tied.json", tied[k], strlen(tied[k]));
        ckpt_manifest *m = NULL;
        CHECK_EQ_INT(ckpt_manifest_load(&m, tpath("tied.json"), NULL), 0);
        CHECK(m && ckpt_manifest_count(m) == 2);
        if (m) CHECK_EQ_INT(ckpt_manifest_tie_root(m, 0), ckpt_manifest_tie_root(m, 1));
        ckpt_manifest_free(m);
    }
    const char *dup = "{\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[2]},"
                      "{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[2]}]}";
    put_file("dup.json", dup, strlen(dup));
    ckpt_manifest *m = (ckpt_manifest *)1;
    CHECK_EQ_INT(ckpt_manifest_load(&m, tpath("dup.json"), NULL), CKPT_E_FORMAT);
    CHECK(m == NULL);
    CHECK(strstr(ckpt_error_last()->message, "tensors[1]: duplicate name 'a'") != NULL);
    const char *stray = "{\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[2]}],"
                        "\"ties\":[[\"a\",\"zz\"]]}";
    put_file("stray.json", stray, strlen(stray));
    CHECK_EQ_INT(ckpt_manifest_load(&m, tpath("stray.json"), NULL), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "ties[0][1]: expected the name of a listed tensor") !=
          NULL);
}

/* Entries i of a and b agree: name, dtype, shape, tie group. */
static void same_manifest(const ckpt_manifest *a, const ckpt_manifest *b) {
    CHECK_EQ_INT(ckpt_manifest_count(a), ckpt_manifest_count(b));
    for (size_t i = 0; i < ckpt_manifest_count(a) && i < ckpt_manifest_count(b); i++) {
        const ckpt_manifest_entry *x = ckpt_manifest_entry_at(a, i);
        const ckpt_manifest_entry *y = ckpt_manifest_entry_at(b, i);
        CHECK_EQ_STR(x->name, y->name);
        CHECK_EQ_STR(x->dtype, y->dtype);
        CHECK_EQ_INT(x->ndim, y->ndim);
        if (x->ndim == y->ndim) CHECK(memcmp(x->shape, y->shape, x->ndim * sizeof *x->shape) == 0);
        CHECK_EQ_INT(ckpt_manifest_tie_root(a, i), ckpt_manifest_tie_root(b, i));
    }
}

/* A manifest of n tensors (names of varying length, 0 to 3 dimensions,
 * two dtypes, an extra key) after metadata and a "file" string of `pad`
 * bytes, then ties of entries 0 and 60, then `tail` spaces. malloc'd,
 * *len bytes. */
static char *window_text(size_t n, size_t pad, size_t tail, size_t *len) {
    size_t cap = pad + tail + n * 160 + 256, at = 0;
    char *t = malloc(cap);
    at += (size_t)snprintf(t + at, cap - at, "{\"metadata\":{\"format\":\"pt\"},\"file\":\"");
    memset(t + at, 'p', pad);
    at += pad;
    at += (size_t)snprintf(t + at, cap - at, "\",\"tensors\":[");
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(t + at, cap - at,
                               "%s{\"name\":\"model.%s.%zu.w\",\"dtype\":\"%s\",\"shape\":[%s],"
                               "\"nbytes\":%zu}",
                               i ? "," : "", i % 3 ? "layers" : "h", i * 7919 % 100003,
                               i % 5 ? "F32" : "BF16",
                               i % 4 == 0   ? ""
                               : i % 4 == 1 ? "3"
                               : i % 4 == 2 ? "4096,11008"
                                            : "2, 3 ,1",
                               i * 12);
    at += (size_t)snprintf(t + at, cap - at, "],\"ties\":[[\"model.h.0.w\",\"model.h.%zu.w\"]]}",
                           (size_t)60 * 7919 % 100003);
    memset(t + at, ' ', tail);
    *len = at + tail;
    return t;
}

/* ckpt_manifest_load reads the text through a window of 1 MiB that
 * slides as the one pass goes (and grows for a value larger than it): a
 * window boundary at every byte of an entry, whitespace after the
 * document longer than a window, a member larger than a window, each read
 * as ckpt_manifest_parse reads the whole text; a repeated name or junk
 * after a window still get jansson's message. */
TEST(load_window) {
    size_t len, n = 18000;
    for (size_t pad = 0; pad < 100; pad++) {
        char *t = window_text(n, pad, pad ? 1 : (size_t)3 << 19, &len);
        CHECK(len > ((size_t)1 << 20) + 100);
        put_file("window.json", t, len);
        ckpt_manifest *a = NULL, *b = NULL;
        CHECK_EQ_INT(ckpt_manifest_load(&a, tpath("window.json"), NULL), 0);
        CHECK_EQ_INT(ckpt_manifest_parse(&b, t, len, "window.json", NULL), 0);
        if (a && b) same_manifest(a, b);
        CHECK(a && ckpt_manifest_count(a) == n);
        if (a) {
            const ckpt_manifest_entry *e = ckpt_manifest_entry_at(a, 6);
            CHECK_EQ_STR(e->name, "model.h.47514.w");
            CHECK(e->ndim == 2 && e->shape[0] == 4096 && e->shape[1] == 11008);
            CHECK_EQ_STR(ckpt_manifest_entry_at(a, 5)->dtype, "BF16");
            CHECK_EQ_INT(ckpt_manifest_tie_root(a, 0), ckpt_manifest_tie_root(a, 60));
            CHECK(ckpt_manifest_tie_root(a, 1) != ckpt_manifest_tie_root(a, 0));
        }
        ckpt_manifest_free(a);
        ckpt_manifest_free(b);
        free(t);
    }
    /* a "file" of 3 MiB: one member larger than the first window */
    char *t = window_text(100, (size_t)3 << 20, 0, &len);
    put_file("window.json", t, len);
    ckpt_manifest *m = NULL;
    CHECK_EQ_INT(ckpt_manifest_load(&m, tpath("window.json"), NULL), 0);
    CHECK(m && ckpt_manifest_count(m) == 100);
    ckpt_manifest_free(m);
    free(t);
    /* a repeated name two windows on: jansson's message, its index */
    t = window_text(n, 0, 0, &len);
    char *last = t + len, *end;
    while (memcmp(--last, "{\"name\"", 7) != 0) {
    }
    end = strchr(last, '}');
    char *dup = malloc(len + 64);
    int k =
        snprintf(dup, len + 64, "%.*s{\"name\":\"model.h.0.w\",\"dtype\":\"BF16\",\"shape\":[]%s",
                 (int)(last - t), t, end);
    put_file("window.json", dup, (size_t)k);
    free(dup);
    m = (ckpt_manifest *)1;
    CHECK_EQ_INT(ckpt_manifest_load(&m, tpath("window.json"), NULL), CKPT_E_FORMAT);
    CHECK(m == NULL);
    CHECK(strstr(ckpt_error_last()->message, "tensors[17999]: duplicate name 'model.h.0.w'") !=
          NULL);
    free(t);
    /* junk after a window of whitespace: not JSON */
    t = window_text(10, 0, (size_t)3 << 19, &len);
    t[len - 1] = 'x';
    put_file("window.json", t, len);
    CHECK_EQ_INT(ckpt_manifest_load(&m, tpath("window.json"), NULL), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "not valid JSON") != NULL);
    free(t);
}

/* The text of a manifest is never whole in memory while its keys are
 * read (ckpt match of two million-key manifests holds one manifest and
 * reads the other): loading 100,000 keys (a text of 7.6 MB) peaks at
 * what the loaded manifest keeps (acct.h counts what goes through ckpt's
 * allocator): the window is freed before the index is made. */
TEST(load_window_memory) {
    size_t len;
    char *t = window_text(100000, 0, 0, &len);
    CHECK(len > (size_t)7 << 20);
    put_file("window.json", t, len);
    free(t);
    acct_live = acct_peak = 0;
    ckpt_set_allocator(&acct_allocator);
    ckpt_manifest *m = NULL;
    CHECK_EQ_INT(ckpt_manifest_load(&m, tpath("window.json"), NULL), 0);
    size_t kept = acct_live;
    ckpt_manifest_free(m);
    ckpt_set_allocator(NULL);
    CHECK_EQ_INT(acct_live, 0);
    /* the whole text beside the keys read: 1.46 MB over (the window is
     * freed before the index is made) */
    CHECK(acct_peak <= kept + ((size_t)1 << 18));
}

/* The index's slots: 24 bytes on 64-bit targets (two million of them
 * for a million keys), keys told apart by their bytes when the 32 bits
 * of hash kept agree, and a key of 4 GiB or more refused, unread. */
TEST(strmap_slots) {
    if (sizeof(void *) == 8) CHECK_EQ_INT(sizeof(ckpt_strmap_slot), 24);
    ckpt_strmap m = {0};
    ckpt_strmap_slot *sl;
    const uint64_t h = ckpt_strmap_hash("ab", 2);
    CHECK_EQ_INT(ckpt_strmap_put_hashed(&m, "ab", 2, h, 7, &sl), 1);
    /* the same low 32 bits, another key: a slot of its own */
    CHECK_EQ_INT(ckpt_strmap_put_hashed(&m, "cd", 2, h ^ (1ull << 40), 8, &sl), 1);
    CHECK_EQ_INT(ckpt_strmap_put_hashed(&m, "ab", 2, h, 9, &sl), 0);
    CHECK_EQ_INT(sl->val, 7);
    sl = ckpt_strmap_find(&m, "cd", 2, h ^ (1ull << 40));
    CHECK(sl && sl->val == 8);
    for (size_t i = 0; i < 100; i++) { /* rehashes keep both */
        char *k = malloc(8);
        snprintf(k, 8, "k%zu", i);
        CHECK_EQ_INT(ckpt_strmap_put(&m, k, strlen(k), i, &sl), 1);
    }
    CHECK(ckpt_strmap_find(&m, "ab", 2, h)->val == 7);
    CHECK(ckpt_strmap_find(&m, "cd", 2, h ^ (1ull << 40))->val == 8);
    CHECK(ckpt_strmap_find(&m, "k99", 3, ckpt_strmap_hash("k99", 3))->val == 99);
#if SIZE_MAX > UINT32_MAX
    size_t huge = (size_t)UINT32_MAX + 1;
    CHECK_EQ_INT(ckpt_strmap_put_hashed(&m, "x", huge, 0, 1, &sl), CKPT_E_NOMEM);
    CHECK(ckpt_strmap_find(&m, "x", huge, 0) == NULL);
#endif
    for (size_t i = 0; i < m.cap; i++)
        if (m.slots[i].s && m.slots[i].s[0] == 'k') free((char *)m.slots[i].s);
    ckpt_strmap_free(&m);
}

TEST(diff_logical_tree) {
    write_training("t.pt", CKPT_FORMAT_TORCH_ZIP, 2);
    write_training("t.safetensors", CKPT_FORMAT_SAFETENSORS, 2);
    write_training("t7.safetensors", CKPT_FORMAT_SAFETENSORS, 7);
    ckpt_manifest *pt = load("t.pt"), *st = load("t.safetensors"), *st7 = load("t7.safetensors");
    /* as stored, the safetensors file has a F64 [2, 2] and no values */
    CHECK(st && strcmp(ckpt_manifest_find(st, "model.c")->dtype, "F64") == 0);
    ckpt_diff_result *r = NULL;
    CHECK_EQ_INT(ckpt_diff(&r, pt, st, NULL), 0);
    CHECK_EQ_INT(ckpt_diff_identical(r), 1);
    CHECK_EQ_INT(ckpt_diff_equal_count(r), 2);
    CHECK_EQ_INT(ckpt_diff_values_equal(r), 2);
    ckpt_diff_result_free(r);
    ckpt_diff_options o = CKPT_DIFF_OPTIONS_INIT;
    o.keys_only = 1; /* the recorded dtype and shape: C128 [2] */
    CHECK_EQ_INT(ckpt_diff(&r, pt, st, &o), 0);
    CHECK_EQ_INT(ckpt_diff_identical(r), 1);
    ckpt_diff_result_free(r);
    CHECK_EQ_INT(ckpt_diff(&r, st7, pt, NULL), 0);
    CHECK_EQ_INT(ckpt_diff_identical(r), 0);
    CHECK_EQ_STR(vnames(r, CKPT_DIFF_VALUES_DIFFERING), "epoch");
    CHECK_EQ_INT(ckpt_diff_equal_count(r), 2);
    ckpt_diff_result_free(r);
    ckpt_manifest_free(pt);
    ckpt_manifest_free(st);
    ckpt_manifest_free(st7);
}

/* ------------------------------------------------------------ diff: keys */

static ckpt_diff_result *diff_keys(const char *const *a, const char *const *b, int normalize) {
    ckpt_diff_result *r = NULL;
    ckpt_diff_options o = CKPT_DIFF_OPTIONS_INIT;
    o.keys_only = 1;
    o.normalize = normalize;
    cur_c = manifest_of(a);
    cur_e = manifest_of(b);
    CHECK_EQ_INT(ckpt_diff(&r, cur_c, cur_e, &o), 0);
    return r;
}

static void diff_done(ckpt_diff_result *r) {
    ckpt_diff_result_free(r);
    ckpt_manifest_free(cur_c);
    ckpt_manifest_free(cur_e);
    cur_c = cur_e = NULL;
}

TEST(diff_key_rewrites) {
    const char *dp[] = {"module.fc1.weight", "module.fc1.bias", "module.fc2.weight",
                        "module.fc2.bias", NULL};
    ckpt_diff_result *r = diff_keys(MODEL, dp, 0);
    CHECK_EQ_INT(ckpt_diff_identical(r), 0);
    CHECK_EQ_INT(ckpt_diff_count(r, CKPT_DIFF_ONLY_IN_B), 4);
    const ckpt_rewrite *rw = ckpt_diff_rewrite(r);
    CHECK(rw && strcmp(rw->description, "strip 'module.'") == 0 && rw->matches == 4 &&
          !rw->applied);
    CHECK_EQ_STR(ckpt_diff_rewrite_note(r), "B's keys are A's with 'module.' added");
    diff_done(r);
    r = diff_keys(MODEL, dp, 1);
    CHECK_EQ_INT(ckpt_diff_identical(r), 1);
    CHECK(ckpt_diff_rewrite(r) && ckpt_diff_rewrite(r)->applied);
    diff_done(r);
    r = diff_keys(dp, MODEL, 0);
    CHECK_EQ_STR(ckpt_diff_rewrite_note(r), "B's keys are A's without 'module.'");
    diff_done(r);
    const char *renamed[] = {"net.fc1.weight", "net.fc1.bias", "net.fc2.weight", "net.fc2.bias",
                             NULL};
    r = diff_keys(dp, renamed, 0);
    CHECK_EQ_STR(ckpt_diff_rewrite_note(r), "B's keys are A's with 'module.' replaced by 'net.'");
    diff_done(r);
    const char *compiled[] = {"_orig_mod.fc1.weight", "_orig_mod.fc1.bias", "fc2.weight",
                              "fc2._orig_mod.bias", NULL};
    r = diff_keys(MODEL, compiled, 1);
    CHECK_EQ_STR(ckpt_diff_rewrite_note(r), "B's keys become A's by: drop '_orig_mod.' segments");
    CHECK_EQ_INT(ckpt_diff_identical(r), 1);
    diff_done(r);

    /* B a training checkpoint holding A under 'model.' */
    const char *train[] = {"model.fc1.weight",
                           "model.fc1.bias",
                           "model.fc2.weight",
                           "model.fc2.bias",
                           "optimizer.state.0.exp_avg",
                           "optimizer.state.1.exp_avg",
                           "optimizer.state.2.exp_avg",
                           "optimizer.state.3.exp_avg",
                           "scaler.scale",
                           NULL};
    r = diff_keys(MODEL, train, 0);
    CHECK_EQ_STR(ckpt_diff_rewrite_note(r),
                 "B's keys under 'model.' are A's; B's other top-level entries: optimizer, "
                 "scaler");
    diff_done(r);
    /* applied, the other top-level entries the note names are left out:
     * not listed, not counted (they were listed as only in B, exit 1) */
    r = diff_keys(MODEL, train, 1);
    CHECK_EQ_STR(ckpt_diff_rewrite_note(r),
                 "B's keys under 'model.' are A's; B's other top-level entries: optimizer, "
                 "scaler (left out: not compared)");
    CHECK_EQ_INT(ckpt_diff_identical(r), 1);
    CHECK_EQ_INT(ckpt_diff_count(r, CKPT_DIFF_ONLY_IN_A), 0);
    CHECK_EQ_INT(ckpt_diff_count(r, CKPT_DIFF_ONLY_IN_B), 0);
    CHECK_EQ_INT(ckpt_diff_count(r, CKPT_DIFF_SHAPE_MISMATCH), 0); /* pairs are right */
    diff_done(r);
    /* and the other way round: A's keys under 'model.' */
    r = diff_keys(train, MODEL, 1);
    CHECK_EQ_STR(ckpt_diff_rewrite_note(r),
                 "A's keys under 'model.' are B's; A's other top-level entries: optimizer, "
                 "scaler (left out: not compared)");
    CHECK_EQ_STR(ckpt_diff_rewrite(r)->description, "add 'model.'");
    CHECK_EQ_INT(ckpt_diff_identical(r), 1);
    CHECK_EQ_INT(ckpt_diff_count(r, CKPT_DIFF_ONLY_IN_A), 0);
    CHECK_EQ_INT(ckpt_diff_count(r, CKPT_DIFF_ONLY_IN_B), 0);
    CHECK_EQ_INT(ckpt_diff_count(r, CKPT_DIFF_SHAPE_MISMATCH), 0);
    diff_done(r);

    /* keys that no rewrite pairs: nothing named, nothing renamed */
    const char *partial[] = {"module.fc1.weight", "module.fc1.bias", "module.fc2.weight", "other",
                             NULL};
    r = diff_keys(MODEL, partial, 1);
    CHECK(ckpt_diff_rewrite(r) == NULL && ckpt_diff_rewrite_note(r) == NULL);
    CHECK_EQ_INT(ckpt_diff_count(r, CKPT_DIFF_ONLY_IN_B), 4);
    diff_done(r);
    const char *nested[] = {
        "model.fc1.weight", "model.fc1.bias", "model.fc2.weight", "model.fc2.bias", "model_ema.x",
        "model_ema.y",      "model_ema.z",    "model.extra.a",    "model.extra.b",  NULL};
    r = diff_keys(MODEL, nested, 1); /* the leftovers are inside 'model.' */
    CHECK(ckpt_diff_rewrite(r) == NULL);
    diff_done(r);
    /* identical key sets: no inference */
    r = diff_keys(MODEL, MODEL, 1);
    CHECK(ckpt_diff_rewrite(r) == NULL);
    CHECK_EQ_INT(ckpt_diff_identical(r), 1);
    diff_done(r);
}

/* ------------------------------------------------------------ rename */

static const char *plan_text(const ckpt_rename_plan *p) {
    static char buf[2048];
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < ckpt_rename_plan_count(p); i++)
        used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s", i ? "," : "",
                                 ckpt_rename_plan_to(p, i));
    return buf;
}

TEST(rename_rules) {
    const char *keys[] = {"module.layer.0.w", "module.layers.1.w", "module.x._orig_mod.y", "",
                          NULL};
    ckpt_manifest *m = manifest_of(keys);
    ckpt_rename_plan *p = NULL;
    ckpt_rename_rule strip = {CKPT_RENAME_STRIP_PREFIX, "module", NULL, NULL};
    CHECK_EQ_INT(ckpt_rename_plan_new(&p, m, &strip, 1), 0);
    CHECK_EQ_STR(plan_text(p), "layer.0.w,layers.1.w,x._orig_mod.y,");
    CHECK_EQ_INT(ckpt_rename_plan_changed(p), 3);
    CHECK_EQ_STR(ckpt_rename_plan_from(p, 0), "module.layer.0.w");
    ckpt_rename_plan_free(p);

    /* whole segments only: "layer" leaves "layers" alone; wrappers anywhere */
    ckpt_rename_rule rules[] = {{CKPT_RENAME_REPLACE, "layer", "block", NULL},
                                {CKPT_RENAME_REPLACE, "_orig_mod.", "", NULL},
                                {CKPT_RENAME_ADD_PREFIX, "net.", NULL, NULL}};
    CHECK_EQ_INT(ckpt_rename_plan_new(&p, m, rules, 3), 0);
    CHECK_EQ_STR(plan_text(p), "net.module.block.0.w,net.module.layers.1.w,net.module.x.y,net");
    ckpt_rename_plan_free(p);

    /* a rule that matches nothing is named */
    ckpt_rename_rule none[] = {strip, {CKPT_RENAME_STRIP_PREFIX, "model.", NULL, NULL}};
    CHECK_EQ_INT(ckpt_rename_plan_new(&p, m, none, 2), CKPT_E_NOTFOUND);
    CHECK_EQ_STR(ckpt_error_last()->message, "--strip-prefix 'model.' matches no key");
    CHECK(p == NULL);
    ckpt_rename_rule empty = {CKPT_RENAME_REPLACE, "", "x", NULL};
    CHECK_EQ_INT(ckpt_rename_plan_new(&p, m, &empty, 1), CKPT_E_INVALID_ARG);
    ckpt_manifest_free(m);

    /* two keys onto one name: both named */
    const char *two[] = {"module.a", "a", NULL};
    m = manifest_of(two);
    CHECK_EQ_INT(ckpt_rename_plan_new(&p, m, &strip, 1), CKPT_E_MISMATCH);
    CHECK_EQ_STR(ckpt_error_last()->message, "'module.a' and 'a' would both be named 'a'");
    ckpt_manifest_free(m);
}

TEST(rename_auto) {
    const char *c[] = {"module.fc1.weight", "module.fc1.bias", "module.fc2.weight",
                       "module.fc2.bias", NULL};
    ckpt_manifest *mc = manifest_of(c), *me = manifest_of(MODEL);
    ckpt_rename_plan *p = NULL;
    ckpt_rename_rule r = {CKPT_RENAME_AUTO, NULL, NULL, me};
    CHECK_EQ_INT(ckpt_rename_plan_new(&p, mc, &r, 1), 0);
    CHECK_EQ_STR(plan_text(p), "fc1.weight,fc1.bias,fc2.weight,fc2.bias");
    ckpt_rename_plan_free(p);
    /* already matching: nothing to do */
    r.spec = mc;
    CHECK_EQ_INT(ckpt_rename_plan_new(&p, mc, &r, 1), CKPT_E_NOTFOUND);
    /* no complete rewrite */
    const char *partial[] = {"module.fc1.weight", "module.fc1.bias", "module.fc2.weight",
                             "fc2.extra", NULL};
    ckpt_manifest *mp = manifest_of(partial);
    r.spec = me;
    CHECK_EQ_INT(ckpt_rename_plan_new(&p, mp, &r, 1), CKPT_E_MISMATCH);
    CHECK(strstr(ckpt_error_last()->message, "strip 'module.', matches 3 of 4") != NULL);
    ckpt_manifest_free(mp);
    ckpt_manifest_free(mc);
    ckpt_manifest_free(me);
}

/* ------------------------------------------------------------ hygiene */

/* The file and buffer behind the last hygiene_of() report. */
static ckpt_file *hyg_file;
static unsigned char *hyg_mem;

static void hygiene_done(ckpt_keys_report *r) {
    ckpt_keys_report_free(r);
    ckpt_close(hyg_file);
    free(hyg_mem);
    hyg_file = NULL;
    hyg_mem = NULL;
}

static ckpt_keys_report *hygiene_of(const char *header) {
    size_t len;
    hyg_mem = st_file(header, "\0\0\0\0\0\0\0\0", 8, &len);
    CHECK_EQ_INT(ckpt_open_memory(&hyg_file, hyg_mem, len, "h", NULL), 0);
    ckpt_keys_report *r = NULL;
    CHECK_EQ_INT(ckpt_keys_hygiene(&r, hyg_file), 0);
    return r;
}

TEST(hygiene) {
    ckpt_keys_report *r = hygiene_of(
        "{\"module._orig_mod.a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"module._orig_mod.b._fsdp_wrapped_module.c\":{\"dtype\":\"F32\",\"shape\":[1],"
        "\"data_offsets\":[4,8]}}");
    CHECK_EQ_INT(ckpt_keys_wrapper_count(r), 3);
    const ckpt_key_wrapper *w = ckpt_keys_wrapper(r, 0);
    CHECK(w && strcmp(w->segment, "module.") == 0 && w->leading && w->keys == 2);
    w = ckpt_keys_wrapper(r, 1);
    CHECK(w && strcmp(w->segment, "_orig_mod.") == 0 && !w->leading && w->keys == 2);
    w = ckpt_keys_wrapper(r, 2);
    CHECK(w && strcmp(w->segment, "_fsdp_wrapped_module.") == 0 && w->keys == 1);
    CHECK_EQ_STR(ckpt_keys_fix_args(r), "--replace '_orig_mod.=' --replace "
                                        "'_fsdp_wrapped_module.=' --strip-prefix module.");
    CHECK_EQ_INT(ckpt_keys_fix_count(r), 3);
    CHECK(ckpt_keys_collision(r) == NULL);
    hygiene_done(r);

    r = hygiene_of("{\"module.a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}");
    CHECK_EQ_INT(ckpt_keys_wrapper_count(r), 1);
    CHECK(ckpt_keys_fix_args(r) == NULL);
    CHECK_EQ_INT(ckpt_keys_fix_count(r), 0);
    CHECK_EQ_STR(ckpt_keys_collision(r), "'a' and 'module.a' would both be named 'a'");
    hygiene_done(r);

    r = hygiene_of("{\"encoder.module.x\":{\"dtype\":\"F32\",\"shape\":[2],"
                   "\"data_offsets\":[0,8]}}");
    CHECK_EQ_INT(ckpt_keys_wrapper_count(r), 0); /* a middle "module" is a name */
    CHECK(ckpt_keys_fix_args(r) == NULL);
    CHECK(ckpt_keys_collision(r) == NULL);
    hygiene_done(r);

    /* a DDP model saved inside a training dict: "module." where the
     * model's keys start, below the top level */
    static const char ddp_in_dict[] =
        "{\"model.module.module.fc.w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"model.module.module._orig_mod.b\":{\"dtype\":\"F32\",\"shape\":[1],"
        "\"data_offsets\":[4,8]},"
        "\"optim.module.x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
    size_t len;
    hyg_mem = st_file(ddp_in_dict, "\0\0\0\0\0\0\0\0\0\0\0\0", 12, &len);
    CHECK_EQ_INT(ckpt_open_memory(&hyg_file, hyg_mem, len, "h", NULL), 0);
    r = NULL;
    CHECK_EQ_INT(ckpt_keys_hygiene_at(&r, hyg_file, "model"), 0);
    CHECK_EQ_STR(ckpt_keys_root(r), "model.");
    CHECK_EQ_INT(ckpt_keys_wrapper_count(r), 2);
    w = ckpt_keys_wrapper(r, 0);
    CHECK(w && strcmp(w->segment, "module.") == 0 && w->keys == 2);
    CHECK_EQ_STR(ckpt_keys_fix_args(r),
                 "--replace '_orig_mod.=' --replace 'model.module.module.=model.'");
    CHECK_EQ_STR(ckpt_keys_fix_python(r),
                 "sd['model'] = {k.replace('_orig_mod.', '').removeprefix('module.')"
                 ".removeprefix('module.'): v for k, v in sd['model'].items()}");
    ckpt_keys_report_free(r);
    /* the same file seen from the top: "model.module." is a name there */
    CHECK_EQ_INT(ckpt_keys_hygiene(&r, hyg_file), 0);
    CHECK_EQ_INT(ckpt_keys_wrapper_count(r), 1);
    CHECK_EQ_STR(ckpt_keys_fix_python(r),
                 "sd = {k.replace('_orig_mod.', ''): v for k, v in sd.items()}");
    hygiene_done(r);
}

/* ------------------------------------------------------------ allocation */

static int fail_at; /* the allocation that fails (fail_alloc.h) */

/* Every allocation of a match with inference fails in turn: a clean
 * CKPT_E_NOMEM, nothing leaked (ASan), never a crash. */
TEST(allocation_failures) {
    const char *c[] = {"module._orig_mod.fc1.weight", "module._orig_mod.fc1.bias",
                       "module._orig_mod.fc2.weight", "x", NULL};
    int nomem = 0, ok = 0;
    for (fail_at = 1; fail_at < 400; fail_at++) {
        fail_alloc_arm(fail_at);
        ckpt_manifest *mc = NULL, *me = NULL;
        ckpt_match_result *r = NULL;
        ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
        o.normalize = 1;
        int rc = ckpt_manifest_new(&mc, "c");
        for (size_t i = 0; rc == 0 && c[i]; i++) rc = ckpt_manifest_add(mc, c[i], "F32", 0, NULL);
        if (rc == 0) rc = ckpt_manifest_new(&me, "e");
        for (size_t i = 0; rc == 0 && MODEL[i]; i++)
            rc = ckpt_manifest_add(me, MODEL[i], "F32", 0, NULL);
        if (rc == 0) rc = ckpt_match(&r, mc, me, &o);
        if (rc == 0) CHECK(r != NULL);
        ckpt_match_result_free(r);
        ckpt_manifest_free(mc);
        ckpt_manifest_free(me);
        ckpt_set_allocator(NULL);
        if (rc == CKPT_E_NOMEM)
            nomem++;
        else if (rc == 0)
            ok++;
        else
            CHECK_EQ_INT(rc, CKPT_E_NOMEM);
        if (rc == 0 && fail_alloc_calls < fail_at) break; /* every allocation was tried */
    }
    CHECK(nomem > 10);
    CHECK_EQ_INT(ok, 1);
}

/* Every allocation of a match with a BatchNorm counter fails in turn:
 * manifests with "module_versions" and "batchnorm_counters" (the one pass
 * or, when it steps aside, jansson), a rewrite selecting "model.", the
 * counter defaulted: a clean CKPT_E_NOMEM, nothing leaked (ASan). */
TEST(batchnorm_allocation_failures) {
    const char *ck = "{\"tensors\":[{\"name\":\"model.bn.weight\",\"dtype\":\"F32\",\"shape\":[2]},"
                     "{\"name\":\"epoch\",\"dtype\":\"I64\",\"shape\":[]}],"
                     "\"module_versions\":{\"model.bn\":1,\"model\":1}}";
    const char *spec = "{\"tensors\":[{\"name\":\"bn.weight\",\"dtype\":\"F32\",\"shape\":[2]},"
                       "{\"name\":\"bn.num_batches_tracked\",\"dtype\":\"I64\",\"shape\":[]}],"
                       "\"batchnorm_counters\":[\"bn.num_batches_tracked\"]}";
    int nomem = 0, ok = 0;
    for (fail_at = 1; fail_at < 400; fail_at++) {
        fail_alloc_arm(fail_at);
        ckpt_manifest *mc = NULL, *me = NULL;
        ckpt_match_result *r = NULL;
        ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
        o.normalize = 1;
        int rc = ckpt_manifest_parse(&mc, ck, strlen(ck), "c", NULL);
        if (rc == 0) rc = ckpt_manifest_parse(&me, spec, strlen(spec), "e", NULL);
        if (rc == 0) rc = ckpt_match(&r, mc, me, &o);
        if (rc == 0) {
            CHECK_EQ_INT(ckpt_match_complete(r), 1);
            CHECK_EQ_STR(names(r, CKPT_MATCH_DEFAULTED), "bn.num_batches_tracked");
        }
        ckpt_match_result_free(r);
        ckpt_manifest_free(mc);
        ckpt_manifest_free(me);
        ckpt_set_allocator(NULL);
        if (rc == CKPT_E_NOMEM)
            nomem++;
        else if (rc == 0)
            ok++;
        else
            CHECK_EQ_INT(rc, CKPT_E_NOMEM);
        if (rc == 0 && fail_alloc_calls < fail_at) break; /* every allocation was tried */
    }
    CHECK(nomem > 10);
    CHECK(ok >= 1);
}

/* Every allocation of ckpt_manifest_load's one pass over a window of the
 * file (the window, names, entries, ties, the index) fails in turn: a
 * clean CKPT_E_NOMEM, or the manifest read whole by jansson (a string the
 * scanner cannot copy steps aside, as it does for anything it does not
 * read), nothing leaked (ASan), never a crash. */
TEST(load_allocation_failures) {
    size_t len;
    char *t = window_text(80, 0, 0, &len); /* 80: the tie names entry 60 */
    put_file("small.json", t, len);
    free(t);
    int nomem = 0, ok = 0;
    for (fail_at = 1; fail_at < 400; fail_at++) {
        fail_alloc_arm(fail_at);
        ckpt_manifest *m = NULL;
        int rc = ckpt_manifest_load(&m, tpath("small.json"), NULL);
        ckpt_set_allocator(NULL);
        if (rc == 0) CHECK(m && ckpt_manifest_count(m) == 80);
        ckpt_manifest_free(m);
        if (rc == CKPT_E_NOMEM)
            nomem++;
        else if (rc == 0)
            ok++;
        else
            CHECK_EQ_INT(rc, CKPT_E_NOMEM);
        if (rc == 0 && fail_alloc_calls < fail_at) break; /* every allocation was tried */
    }
    CHECK(nomem > 5);
    CHECK(ok >= 1 && ok <= 3);
}

/* Every allocation of a diff fails in turn: values of a recorded tree (the
 * files diff_logical_tree wrote), and a key rewrite applied to B. */
TEST(diff_allocation_failures) {
    const char *dp[] = {"module.fc1.weight", "module.fc1.bias",      "module.fc2.weight",
                        "module.fc2.bias",   "module.x._orig_mod.y", NULL};
    const char *plain[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "x.y", NULL};
    ckpt_manifest *pairs[2][2] = {{load("t.pt"), load("t7.safetensors")},
                                  {manifest_of(plain), manifest_of(dp)}};
    for (int k = 0; k < 2; k++) {
        int nomem = 0, ok = 0;
        for (fail_at = 1; fail_at < 2000; fail_at++) {
            ckpt_diff_options o = CKPT_DIFF_OPTIONS_INIT;
            o.keys_only = k;
            o.normalize = 1;
            ckpt_diff_result *r = NULL;
            fail_alloc_arm(fail_at);
            int rc = ckpt_diff(&r, pairs[k][0], pairs[k][1], &o);
            ckpt_set_allocator(NULL);
            if (rc == 0) {
                /* the same result as without failures */
                CHECK_EQ_INT(ckpt_diff_identical(r), k);
                CHECK_EQ_INT(k ? ckpt_diff_rewrite(r) != NULL
                               : ckpt_diff_value_count(r, CKPT_DIFF_VALUES_DIFFERING) == 1,
                             1);
                ok++;
            } else {
                CHECK_EQ_INT(rc, CKPT_E_NOMEM);
                nomem++;
            }
            ckpt_diff_result_free(r);
            if (rc == 0 && fail_alloc_calls < fail_at) break; /* every allocation was tried */
        }
        CHECK(nomem > 10);
        CHECK_EQ_INT(ok, 1);
        ckpt_manifest_free(pairs[k][0]);
        ckpt_manifest_free(pairs[k][1]);
    }
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(manifest_add_find);
    RUN(manifest_many);
    RUN(manifest_json);
    RUN(segments);
    RUN(identical_sets);
    RUN(exact_full_names);
    RUN(strip_module_normalize);
    RUN(stacked_and_mid_key_wrappers);
    RUN(never_strip_ordinary_middle_segment);
    RUN(partial_prefix);
    RUN(renamed_part);
    RUN(select_root_entries);
    RUN(tied_candidates);
    RUN(batchnorm_counter_defaulted);
    RUN(training_checkpoint_subtree);
    RUN(collision);
    RUN(allowed_exceptions);
    RUN(dtype_and_shape);
    RUN(tied_by_alias);
    RUN(set_metadata);
    RUN(tied_by_manifest);
    RUN(peft_adapter);
    RUN(empty_sets);
    RUN(property_normalize_restores_or_applies_nothing);
    RUN(property_training_subtree);
    RUN(diff_first_difference_late);
    RUN(diff_bf16_f16_same_dtype);
    RUN(diff_f32_values);
    RUN(diff_exclude);
    RUN(diff_widths);
    RUN(diff_keys_and_ints);
    RUN(diff_leaves);
    RUN(name_limit_agrees);
    RUN(load_frees_text_early);
    RUN(load_window);
    RUN(load_window_memory);
    RUN(load_allocation_failures);
    RUN(strmap_slots);
    RUN(diff_logical_tree);
    RUN(diff_key_rewrites);
    RUN(rename_rules);
    RUN(rename_auto);
    RUN(hygiene);
    RUN(allocation_failures);
    RUN(batchnorm_allocation_failures);
    RUN(diff_allocation_failures);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return harness_end();
}
