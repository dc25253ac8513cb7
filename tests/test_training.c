/* test_training.c - ckpt_training_*: components, resume verdicts, the
 * optimizer-to-model ratio and metadata, on real PyTorch checkpoints:
 * examples/train.pt (Adam), the corpus' burn checkpoint (SGD state without
 * param_groups), and the files tests/training/gen_training.py wrote into
 * tests/training/data (its docstring says how they were trained). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "fail_alloc.h"
#include "harness.h"

/* This file's directory: the sources are compiled with absolute paths. */
static char src_dir[4096];

static const char *path_of(const char *rel) {
    static char buf[8192];

    snprintf(buf, sizeof buf, "%s/%s", src_dir, rel);
    return buf;
}

typedef struct analysis {
    ckpt_file *f;
    ckpt_training *t;
} analysis;

static analysis analyse(const char *path) {
    analysis a = {NULL, NULL};

    CHECK_EQ_INT(ckpt_open(&a.f, path, NULL), 0);
    if (a.f) CHECK_EQ_INT(ckpt_training_analyze(&a.t, a.f), 0);
    return a;
}

static void done(analysis *a) {
    ckpt_training_free(a->t);
    ckpt_close(a->f);
}

/* The n-th component of a kind (n from 0), or NULL. */
static const ckpt_component *comp(const ckpt_training *t, ckpt_component_kind kind, size_t n) {
    size_t i;

    for (i = 0; t && i < ckpt_training_component_count(t); i++) {
        const ckpt_component *c = ckpt_training_component(t, i);

        if (c->kind == kind && n-- == 0) return c;
    }
    return NULL;
}

static const ckpt_component *counter(const ckpt_training *t, const char *name) {
    size_t i;

    for (i = 0; t && i < ckpt_training_component_count(t); i++) {
        const ckpt_component *c = ckpt_training_component(t, i);

        if (c->kind == CKPT_COMPONENT_COUNTER && strcmp(c->name, name) == 0) return c;
    }
    return NULL;
}

/* 1 when some reason (or warning, with warnings) contains s. */
static int said(const ckpt_training *t, int warnings, const char *s) {
    size_t n = warnings ? ckpt_training_warning_count(t) : ckpt_training_reason_count(t), i;

    for (i = 0; i < n; i++)
        if (strstr(warnings ? ckpt_training_warning(t, i) : ckpt_training_reason(t, i), s))
            return 1;
    return 0;
}

/* examples/train.pt: a 16->32->4 MLP (676 fp32 parameters) after 5 Adam
 * steps, with StepLR, epoch 3 and step 5. */
TEST(adam_full_resume) {
    analysis a = analyse(path_of("../examples/train.pt"));
    const ckpt_component *model, *opt, *sched, *c;

    if (!a.t) return;
    CHECK_EQ_INT(ckpt_training_resume(a.t), CKPT_RESUME_FULL);
    CHECK_EQ_STR(ckpt_resume_name(ckpt_training_resume(a.t)), "full-resume");
    model = comp(a.t, CKPT_COMPONENT_MODEL, 0);
    opt = comp(a.t, CKPT_COMPONENT_OPTIMIZER, 0);
    sched = comp(a.t, CKPT_COMPONENT_SCHEDULER, 0);
    CHECK(model && opt && sched);
    CHECK(comp(a.t, CKPT_COMPONENT_MODEL, 1) == NULL);
    if (!model || !opt || !sched) goto out;
    CHECK_EQ_STR(model->name, "model");
    CHECK_EQ_INT(model->tensors, 4);
    CHECK_EQ_INT(model->elements, 676);
    CHECK_EQ_INT(model->bytes, 2704);
    CHECK_EQ_INT(model->param_bytes, 2704);
    CHECK_EQ_STR(opt->name, "optimizer");
    CHECK_EQ_STR(opt->type, "Adam/AdamW");
    /* exp_avg + exp_avg_sq per parameter, plus four 0-dim step tensors */
    CHECK_EQ_INT(opt->tensors, 12);
    CHECK_EQ_INT(opt->elements, 2 * 676 + 4);
    CHECK_EQ_INT(opt->bytes, 2 * 2704 + 16);
    CHECK_EQ_INT(opt->state_bytes, 2 * 2704);
    CHECK_EQ_INT(opt->params, 4);
    CHECK_EQ_INT(opt->params_with_state, 4);
    CHECK(opt->param_groups && ckpt_value_len(opt->param_groups) == 1);
    CHECK(ckpt_training_optimizer_ratio(a.t) == 2.0);
    CHECK_EQ_STR(sched->type, "StepLR");
    /* counter types as written: python ints, Adam's 0-dim F32 step */
    c = counter(a.t, "epoch");
    CHECK(c && strcmp(c->type, "int") == 0 && c->number == 3.0);
    c = counter(a.t, "step");
    CHECK(c && strcmp(c->type, "int") == 0 && c->number == 5.0);
    c = counter(a.t, "optimizer.state.0.step");
    CHECK(c && strcmp(c->type, "0-dim F32 tensor") == 0 && c->number == 5.0);
    CHECK(said(a.t, 0, "shapes match the model's parameters in order"));
    /* no RNG state; the scheduler is there; fp32 only: no AMP, so no grad
     * scaler is missed */
    CHECK_EQ_INT(ckpt_training_warning_count(a.t), 1);
    CHECK(!said(a.t, 1, "grad scaler"));
    CHECK(said(a.t, 1, "RNG"));
    CHECK_EQ_STR(ckpt_training_weights_path(a.t), ckpt_file_path(a.f));
out:
    done(&a);
}

/* The same weights as safetensors with __metadata__ {"format": "pt"}. */
TEST(safetensors_weights_only) {
    analysis a = analyse(path_of("../examples/train.safetensors"));
    const ckpt_meta_entry *m;

    if (!a.t) return;
    CHECK_EQ_INT(ckpt_training_resume(a.t), CKPT_RESUME_WEIGHTS_ONLY);
    CHECK(isnan(ckpt_training_optimizer_ratio(a.t)));
    /* a deployment file: no warnings about missing training state */
    CHECK_EQ_INT(ckpt_training_warning_count(a.t), 0);
    CHECK(said(a.t, 0, "deployment file"));
    CHECK_EQ_INT(ckpt_training_meta_count(a.t), 1);
    m = ckpt_training_meta(a.t, 0);
    CHECK(m && m->topic == CKPT_META_OTHER);
    CHECK(m && strcmp(m->key, "format") == 0 && strcmp(m->text, "pt") == 0);
    CHECK(m && strcmp(m->source, "__metadata__") == 0);
    done(&a);
}

/* burn's checkpoint: SGD momentum state for parameter 0 only, and no
 * param_groups at all (torch could not load it). */
TEST(burn_partial) {
    analysis a = analyse(CKPT_CORPUS "/torch/burn/checkpoint.pt");
    const ckpt_component *opt;

    if (!a.t) return;
    CHECK_EQ_INT(ckpt_training_resume(a.t), CKPT_RESUME_PARTIAL);
    opt = comp(a.t, CKPT_COMPONENT_OPTIMIZER, 0);
    CHECK(opt != NULL);
    if (opt) {
        CHECK_EQ_STR(opt->type, "SGD (momentum)");
        CHECK(opt->param_groups == NULL);
        CHECK_EQ_INT(opt->params, 1);
        CHECK_EQ_INT(opt->state_bytes, 200);
    }
    CHECK(said(a.t, 0, "no \"param_groups\""));
    CHECK(said(a.t, 0, "state for 1 parameter, the model has 4"));
    /* 200 bytes of momentum per 372 bytes of parameters */
    CHECK(fabs(ckpt_training_optimizer_ratio(a.t) - 200.0 / 372.0) < 1e-12);
    done(&a);
}

TEST(missing_state_partial) {
    analysis a = analyse(path_of("training/data/missing_state.pt"));
    const ckpt_component *opt;

    if (!a.t) return;
    CHECK_EQ_INT(ckpt_training_resume(a.t), CKPT_RESUME_PARTIAL);
    opt = comp(a.t, CKPT_COMPONENT_OPTIMIZER, 0);
    CHECK(opt && opt->params == 4 && opt->params_with_state == 3);
    CHECK(said(a.t, 0,
               "1 of 4 parameters in param_groups has no optimizer "
               "state: 2 (model.fc2.weight)"));
    done(&a);
}

TEST(mismatch_partial) {
    analysis a = analyse(path_of("training/data/mismatch.pt"));

    if (!a.t) return;
    CHECK_EQ_INT(ckpt_training_resume(a.t), CKPT_RESUME_PARTIAL);
    CHECK(said(a.t, 0,
               "parameter 1 (model.fc1.bias): state shape [9], the "
               "model's parameter has [8]"));
    done(&a);
}

/* The optimizer state keyed by parameter name, as get_state_dict returns
 * it (what a DCP save of an FSDP2 or DDP run holds): paired by name,
 * full resume. Before, every name was "not a parameter index": partial,
 * 0 parameters. */
TEST(fqn_full_resume) {
    analysis a = analyse(path_of("training/data/fqn_adam.pt"));
    const ckpt_component *opt;

    if (!a.t) return;
    CHECK_EQ_INT(ckpt_training_resume(a.t), CKPT_RESUME_FULL);
    opt = comp(a.t, CKPT_COMPONENT_OPTIMIZER, 0);
    CHECK(opt && opt->params == 6 && opt->params_with_state == 6);
    CHECK(said(a.t, 0,
               "optimizer Adam/AdamW at 'optimizer': state for all 6 parameters in "
               "param_groups, shapes match the model's parameters by name"));
    CHECK_EQ_INT(ckpt_training_reason_count(a.t), 2);
    done(&a);
}

/* fqn_adam.pt with "fc2.bias" renamed "fc3.bias" in "state" and "params". */
TEST(fqn_unknown_partial) {
    analysis a = analyse(path_of("training/data/fqn_unknown.pt"));
    const ckpt_component *opt;

    if (!a.t) return;
    CHECK_EQ_INT(ckpt_training_resume(a.t), CKPT_RESUME_PARTIAL);
    opt = comp(a.t, CKPT_COMPONENT_OPTIMIZER, 0);
    CHECK(opt && opt->params == 6 && opt->params_with_state == 6);
    CHECK(said(a.t, 0, "'optimizer': parameter 'fc3.bias' is not a parameter of the model"));
    done(&a);
}

/* A float buffer ahead of the parameters: 5 floating-point model tensors,
 * 4 optimizer parameters. The sentence says so, not that the optimizer's
 * order differs from the model's. */
TEST(buffer_multiset) {
    analysis a = analyse(path_of("training/data/buffer_adam.pt"));

    if (!a.t) return;
    CHECK_EQ_INT(ckpt_training_resume(a.t), CKPT_RESUME_FULL);
    CHECK(said(a.t, 0,
               "shapes match the model's parameters as a multiset of shapes (the model has "
               "5 floating-point tensors, the optimizer 4 parameters: buffers or frozen "
               "parameters are not paired in order)"));
    CHECK(!said(a.t, 0, "order is not the model's"));
    done(&a);
}

TEST(no_optimizer_warm_start) {
    analysis a = analyse(path_of("training/data/no_optimizer.pt"));
    const ckpt_component *rng[3];
    size_t i;

    if (!a.t) return;
    CHECK_EQ_INT(ckpt_training_resume(a.t), CKPT_RESUME_WARM_START);
    CHECK(said(a.t, 0, "no optimizer state"));
    CHECK(comp(a.t, CKPT_COMPONENT_SCALER, 0) != NULL);
    for (i = 0; i < 3; i++) rng[i] = comp(a.t, CKPT_COMPONENT_RNG, i);
    CHECK(rng[0] && strcmp(rng[0]->type, "torch-cpu") == 0 && rng[0]->bytes == 5056);
    CHECK(rng[1] && strcmp(rng[1]->type, "numpy") == 0 && rng[1]->bytes == 624 * 4);
    CHECK(rng[2] && strcmp(rng[2]->type, "python") == 0 && rng[2]->tensors == 0);
    CHECK_EQ_INT(ckpt_training_warning_count(a.t), 0);
    CHECK(isnan(ckpt_training_optimizer_ratio(a.t)));
    done(&a);
}

/* Per-parameter entries {'momentum_buffer': None}: complete, no bytes. */
TEST(sgd_without_momentum) {
    analysis a = analyse(path_of("training/data/sgd_plain.pt"));
    const ckpt_component *opt;

    if (!a.t) return;
    CHECK_EQ_INT(ckpt_training_resume(a.t), CKPT_RESUME_FULL);
    opt = comp(a.t, CKPT_COMPONENT_OPTIMIZER, 0);
    CHECK(opt && strcmp(opt->type, "SGD") == 0);
    CHECK(opt && opt->tensors == 0 && opt->state_bytes == 0);
    CHECK(ckpt_training_optimizer_ratio(a.t) == 0.0);
    /* it said "state for all 4 parameters ..., shapes match" of no state */
    CHECK(said(a.t, 0,
               "optimizer SGD at 'optimizer': without momentum it keeps no per-parameter "
               "state; param_groups (hyperparameters, 4 parameters) is all a resume needs"));
    CHECK(!said(a.t, 0, "state for all"));
    done(&a);
}

/* A Hugging Face Trainer checkpoint directory. */
TEST(hf_trainer_dir) {
    ckpt_training *t = NULL;
    const char *dir = path_of("training/data/hf_trainer");
    const char *weights;
    const ckpt_component *c;
    size_t i, arch = 0, versions = 0;
    static const char *const files[] = {"model.safetensors", "optimizer.pt", "rng_state.pth",
                                        "scaler.pt",         "scheduler.pt", "training_args.bin"};

    CHECK_EQ_INT(ckpt_training_analyze_dir(&t, dir, NULL), 0);
    if (!t) return;
    CHECK_EQ_INT(ckpt_training_resume(t), CKPT_RESUME_FULL);
    CHECK_EQ_INT(ckpt_training_warning_count(t), 0);
    CHECK_EQ_INT(ckpt_training_file_count(t), 6);
    for (i = 0; i < 6 && i < ckpt_training_file_count(t); i++)
        CHECK_EQ_STR(ckpt_training_file_name(t, i), files[i]);
    CHECK_EQ_INT(ckpt_training_ignored_count(t), 1);
    CHECK_EQ_STR(ckpt_training_ignored(t, 0), "vocab.txt");
    weights = ckpt_training_weights_path(t);
    CHECK(weights && strstr(weights, "/hf_trainer/model.safetensors"));
    c = comp(t, CKPT_COMPONENT_OPTIMIZER, 0);
    CHECK(c && strcmp(c->file, "optimizer.pt") == 0 && strcmp(c->name, "") == 0);
    /* two groups (decay, no decay): matched as a multiset of shapes */
    CHECK(c && c->param_groups && ckpt_value_len(c->param_groups) == 2);
    CHECK(said(t, 0, "multiset of shapes"));
    CHECK(ckpt_training_optimizer_ratio(t) == 2.0);
    CHECK(comp(t, CKPT_COMPONENT_SCHEDULER, 0) &&
          strcmp(comp(t, CKPT_COMPONENT_SCHEDULER, 0)->type, "LambdaLR") == 0);
    c = counter(t, "global_step");
    CHECK(c && strcmp(c->file, "trainer_state.json") == 0 && strcmp(c->type, "int") == 0 &&
          c->number == 4.0);
    for (i = 0; i < ckpt_training_meta_count(t); i++) {
        const ckpt_meta_entry *m = ckpt_training_meta(t, i);

        arch += m->topic == CKPT_META_ARCHITECTURE && strcmp(m->file, "config.json") == 0;
        versions += m->topic == CKPT_META_VERSIONS && strcmp(m->text, "4.30.0") == 0;
    }
    CHECK_EQ_INT(arch, 2); /* architectures, model_type */
    CHECK_EQ_INT(versions, 1);
    ckpt_training_free(t);
}

TEST(bad_arguments) {
    ckpt_training *t = (ckpt_training *)&t;

    CHECK_EQ_INT(ckpt_training_analyze(&t, NULL), CKPT_E_INVALID_ARG);
    CHECK(t == NULL);
    t = (ckpt_training *)&t;
    CHECK_EQ_INT(ckpt_training_analyze_dir(&t, "/nonexistent-ckpt-dir", NULL), CKPT_E_IO);
    CHECK(t == NULL);
    CHECK_EQ_INT(ckpt_training_analyze_dir(&t, path_of("test_training.c"), NULL), CKPT_E_IO);
    ckpt_training_free(NULL);
    CHECK_EQ_STR(ckpt_resume_name((ckpt_resume)99), "unknown");
    CHECK_EQ_STR(ckpt_component_kind_name((ckpt_component_kind)99), "unknown");
    CHECK_EQ_STR(ckpt_meta_topic_name(CKPT_META_PARALLEL), "parallel_layout");
}

/* A safetensors file in memory (*buf, freed after the file is closed):
 * header JSON h (8-byte length first), then `data` bytes of zeros. */
static ckpt_file *open_st(const char *h, size_t data, unsigned char **buf) {
    size_t n = strlen(h);
    ckpt_file *f = NULL;

    *buf = calloc(1, 8 + n + data);
    for (int i = 0; i < 8; i++) (*buf)[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(*buf + 8, h, n);
    CHECK_EQ_INT(ckpt_open_memory(&f, *buf, 8 + n + data, "flat.safetensors", NULL), 0);
    return f;
}

/* The analysis of a safetensors file without ckpt.structure comes from
 * its sorted tensors, not from its tree: the same components, in the same
 * order, counts, verdict and reasons as the walk over the tree
 * (ckpt_file_root built first), but for the root's value (NULL). Fails
 * when either way misses a kind (weights, scaler, RNG states, counters,
 * loose byte tensors, nothing). */
TEST(flat_safetensors_as_tree) {
    static const struct {
        const char *header;
        size_t data;
        size_t comps;
    } cases[] = {
        /* model weights, in file order unlike name order */
        {"{\"z.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
         "\"a.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
         "\"bn.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[24,32]},"
         "\"mask\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[32,35]}}",
         35, 1},
        /* byte tensors: a torch CPU RNG state, a CUDA one, a counter, loose ones */
        {"{\"z_mask\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]},"
         "\"rng_state\":{\"dtype\":\"U8\",\"shape\":[5056],\"data_offsets\":[3,5059]},"
         "\"cuda\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[5059,5075]},"
         "\"epoch\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[5075,5076]},"
         "\"flags\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[5076,5078]}}",
         5078, 4},
        /* a GradScaler's keys */
        {"{\"scale\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
         "\"growth_factor\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,8]},"
         "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
         16, 1},
        {"{}", 0, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        unsigned char *fb, *tb;
        ckpt_file *flat = open_st(cases[k].header, cases[k].data, &fb);
        ckpt_file *tree = open_st(cases[k].header, cases[k].data, &tb);
        ckpt_training *a = NULL, *b = NULL;

        if (!flat || !tree) break;
        CHECK(ckpt_file_root(tree) != NULL);
        CHECK_EQ_INT(ckpt_training_analyze(&a, flat), 0);
        CHECK_EQ_INT(ckpt_training_analyze(&b, tree), 0);
        if (!a || !b) break;
        CHECK_EQ_INT(ckpt_training_component_count(a), cases[k].comps);
        CHECK_EQ_INT(ckpt_training_component_count(b), cases[k].comps);
        for (size_t i = 0; i < ckpt_training_component_count(a); i++) {
            const ckpt_component *x = ckpt_training_component(a, i);
            const ckpt_component *y = ckpt_training_component(b, i);

            CHECK_EQ_INT(x->kind, y->kind);
            CHECK_EQ_STR(x->name, y->name);
            CHECK_EQ_STR(x->type ? x->type : "", y->type ? y->type : "");
            CHECK_EQ_INT(x->tensors, y->tensors);
            CHECK_EQ_INT(x->elements, y->elements);
            CHECK_EQ_INT(x->bytes, y->bytes);
            CHECK_EQ_INT(x->param_bytes, y->param_bytes);
            CHECK(x->kind == CKPT_COMPONENT_COUNTER ? x->number == y->number
                                                    : isnan(x->number) == isnan(y->number));
            /* only the root has no value: the tree was never built */
            CHECK(x->name[0] ? x->value != NULL : x->value == NULL);
        }
        CHECK_EQ_INT(ckpt_training_resume(a), ckpt_training_resume(b));
        CHECK_EQ_INT(ckpt_training_reason_count(a), ckpt_training_reason_count(b));
        for (size_t i = 0; i < ckpt_training_reason_count(a); i++)
            CHECK_EQ_STR(ckpt_training_reason(a, i), ckpt_training_reason(b, i));
        ckpt_training_free(a);
        ckpt_training_free(b);
        ckpt_close(flat);
        ckpt_close(tree);
        free(fb);
        free(tb);
    }
}

/* Failing allocation k, for every k: CKPT_E_NOMEM, *out NULL, no leak (the
 * ASan build checks leaks); past the last allocation, success. */
TEST(allocation_failures) {
    int fail_at;
    ckpt_file *f = NULL;
    ckpt_training *t = NULL;
    int rc = CKPT_E_NOMEM;

    CHECK_EQ_INT(ckpt_open(&f, path_of("../examples/train.pt"), NULL), 0);
    for (fail_at = 1; f && rc == CKPT_E_NOMEM && fail_at < 100000; fail_at++) {
        fail_alloc_arm(fail_at);
        rc = ckpt_training_analyze(&t, f);
        ckpt_set_allocator(NULL);
        if (rc != 0) CHECK(t == NULL);
        CHECK(rc == 0 || rc == CKPT_E_NOMEM);
        ckpt_training_free(t);
        t = NULL;
    }
    CHECK_EQ_INT(rc, 0);
    CHECK(fail_at > 2); /* the analysis and its arena at least */
    ckpt_close(f);
    /* names interned in a hash map and paired through another */
    f = NULL;
    rc = CKPT_E_NOMEM;
    CHECK_EQ_INT(ckpt_open(&f, path_of("training/data/fqn_adam.pt"), NULL), 0);
    for (fail_at = 1; f && rc == CKPT_E_NOMEM && fail_at < 100000; fail_at++) {
        fail_alloc_arm(fail_at);
        rc = ckpt_training_analyze(&t, f);
        ckpt_set_allocator(NULL);
        if (rc != 0) CHECK(t == NULL);
        CHECK(rc == 0 || rc == CKPT_E_NOMEM);
        ckpt_training_free(t);
        t = NULL;
    }
    CHECK_EQ_INT(rc, 0);
    ckpt_close(f);
    rc = CKPT_E_NOMEM;
    for (fail_at = 1; rc == CKPT_E_NOMEM && fail_at < 100000; fail_at++) {
        fail_alloc_arm(fail_at);
        rc = ckpt_training_analyze_dir(&t, path_of("training/data/hf_trainer"), NULL);
        ckpt_set_allocator(NULL);
        if (rc != 0) CHECK(t == NULL);
        ckpt_training_free(t);
        t = NULL;
    }
    CHECK_EQ_INT(rc, 0);
}

int main(void) {
    const char *slash = strrchr(__FILE__, '/');

    snprintf(src_dir, sizeof src_dir, "%.*s", slash ? (int)(slash - __FILE__) : 1,
             slash ? __FILE__ : ".");
    RUN(adam_full_resume);
    RUN(safetensors_weights_only);
    RUN(flat_safetensors_as_tree);
    RUN_CORPUS(burn_partial);
    RUN(missing_state_partial);
    RUN(mismatch_partial);
    RUN(fqn_full_resume);
    RUN(fqn_unknown_partial);
    RUN(buffer_multiset);
    RUN(no_optimizer_warm_start);
    RUN(sgd_without_momentum);
    RUN(hf_trainer_dir);
    RUN(bad_arguments);
    RUN(allocation_failures);
    return harness_end();
}
