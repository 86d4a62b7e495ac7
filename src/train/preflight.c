/* train: checks a run makes before it builds anything (see train_preflight in train.h): the
 * ranks agree on the config, every input exists, every output folder can be written, and
 * the memory `titan plan` estimates is there. */
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train/internal.h"

/* What every rank must agree on besides the config text: the settings each rank resolves for
 * itself and that decide which collectives run (a bf16 all-gather on one rank against an fp32
 * one on another is a type mismatch or a hang, not just different numbers). */
typedef struct {
    uint64_t config;       /* o->config_hash */
    int32_t prec;          /* the resolved precision: the unset default follows each rank's CPU */
    int32_t transport_f32; /* TITAN_BF16_TRANSPORT */
    uint64_t env;          /* TITAN_FSDP_BWD_GATHER (parallelize.c), as set */
} rank_settings;

static const char *const wire_env[] = {"TITAN_FSDP_BWD_GATHER"};

/* Every rank's settings against rank 0's (one all-gather of a rank_settings per rank): all
 * ranks see the same list, so all of them fail, naming the same first rank. */
static int same_config(const train_opts *o, const dist_mesh *mesh, base_err *err) {
    if (mesh->world <= 1) return 0;
    rank_settings me = {o->config_hash, (int32_t)o->prec, o->transport_f32, BASE_HASH_INIT};
    for (size_t i = 0; i < sizeof wire_env / sizeof *wire_env; i++) {
        const char *v = getenv(wire_env[i]);
        me.env = base_hash_bytes(me.env, v ? v : "", v ? strlen(v) + 1 : 0);
    }
    rank_settings *all = calloc((size_t)mesh->world, sizeof *all);
    if (!all) return base_fail(err, "out of memory");
    dist_allgather_bytes(mesh->world_comm, &me, all, sizeof me);
    int bad = -1;
    for (int r = 1; r < mesh->world && bad < 0; r++)
        if (memcmp(&all[r], &all[0], sizeof me)) bad = r;
    const rank_settings b = bad >= 0 ? all[bad] : me, z = all[0];
    free(all);
    if (bad < 0) return 0;
    if (b.config != z.config)
        return base_fail(err,
                         "rank %d was started with another config than rank 0 (the resolved "
                         "configs differ; compare `titan train ... --print-config` of both): "
                         "every rank must run the same job",
                         bad);
    if (b.prec != z.prec)
        return base_fail(err,
                         "rank %d resolved training.mixed_precision_param to %s, rank 0 to %s "
                         "(unset, it follows each CPU's bf16 units, or TITAN_MIXED_PRECISION): "
                         "set it explicitly when the ranks run on different CPUs",
                         bad, train_prec_name(b.prec), train_prec_name(z.prec));
    return base_fail(err,
                     "rank %d has other TITAN_BF16_TRANSPORT / TITAN_FSDP_BWD_GATHER settings "
                     "than rank 0: every rank must move the same collectives",
                     bad);
}

/* path: a file or folder, or a glob(3) pattern matching something (as the loader reads it:
 * an existing path as named first). */
static int input_exists(const char *field, const char *path, base_err *err) {
    if (!path) return 0;
    struct stat st;
    if (strpbrk(path, "*?[") && stat(path, &st) != 0) {
        glob_t g;
        const int rc = glob(path, 0, NULL, &g);
        const size_t n = rc == 0 ? g.gl_pathc : 0;
        globfree(&g);
        if (n) return 0;
        return base_fail(err, "%s: '%s' matches no file", field, path);
    }
    if (stat(path, &st)) return base_fail(err, "%s: %s: %s", field, path, strerror(errno));
    return 0;
}

/* file is not a folder, and the folder that will hold it (its directory part; "." for a bare
 * name) can be created and written. */
static int output_parent(const char *field, const char *file, base_err *err) {
    if (base_is_dir(file))
        return base_fail(err, "%s: %s is a folder, a file is expected here", field, file);
    char dir[4096];
    const char *slash = strrchr(file, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == file ? 1 : (int)(slash - file), file);
    base_err e;
    if (base_check_output_dir(dir, &e)) return base_fail(err, "%s: %s: %s", field, file, e.msg);
    if (base_output_path_ok(file, &e)) return base_fail(err, "%s: %s", field, e.msg);
    return 0;
}

static int output_dir(const char *field, const char *dir, base_err *err) {
    base_err e;
    if (dir && base_check_output_dir(dir, &e)) return base_fail(err, "%s: %s", field, e.msg);
    return 0;
}

static int paths(const train_opts *o, base_err *err) {
    char tok[4200]; /* the tokenizer folder's tokenizer.json */
    if (o->tokenizer_dir) snprintf(tok, sizeof tok, "%s/tokenizer.json", o->tokenizer_dir);
    for (int i = 0; o->data_paths && i < o->n_data; i++) {
        char field[64];
        snprintf(field, sizeof field, "training.dataset_sources, source %d", i + 1);
        if (input_exists(field, o->data_paths[i], err)) return -1;
    }
    if ((!o->data_paths && input_exists("training.dataset_path", o->data_path, err)) ||
        input_exists("validation.dataset_path", o->val.path, err) ||
        input_exists("model.hf_assets_path", o->tokenizer_dir ? tok : NULL, err) ||
        (o->ckpt.enable &&
         input_exists("checkpoint.initial_load_path", o->ckpt.initial_load_path, err)))
        return -1;
    char ck[4096];
    train_ckpt_folder(o, ck, sizeof ck);
    if ((o->ckpt.enable && output_dir("checkpoint.folder", ck, err)) ||
        output_dir("metrics.save_tb_folder", o->tb_dir, err) ||
        (o->jsonl_path && output_parent("metrics.save_jsonl_file", o->jsonl_path, err)) ||
        (o->report_path && output_parent("metrics.save_report_file", o->report_path, err)) ||
        output_dir("checkpoint.hf_export_folder", o->out_dir, err) ||
        output_dir("profiling.save_traces_folder", o->prof.dir, err))
        return -1;
    return 0;
}

/* bytes as "12.3 GiB", or "45.6 MiB" below a GiB (test-sized runs). */
static const char *size_text(double bytes, char *buf, size_t n) {
    if (bytes >= (1 << 30))
        snprintf(buf, n, "%.1f GiB", bytes / (1 << 30));
    else
        snprintf(buf, n, "%.1f MiB", bytes / (1 << 20));
    return buf;
}

/* titan plan's total for the configured mode with one setting changed. */
static double plan_total(const train_plan_in *in, base_err *err) {
    train_plan p;
    if (train_plan_compute(in, &p, err)) return -1;
    return p.total_conf; /* the configured activation checkpointing's */
}

static int memory(const train_opts *o, int world, base_err *err) {
    if (o->ignore_memory_check) return 0;
    train_plan_in in = train_plan_in_of(o, world);
    base_err e;
    const double need = plan_total(&in, &e);
    if (need < 0) { /* a layout plan does not model: no estimate, no refusal */
        base_log(BASE_LOG_WARN, "no memory estimate for this run (%s)", e.msg);
        return 0;
    }
    /* ranks sharing this machine (OpenMPI says how many); one process otherwise */
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int local = ls && atoi(ls) > 0 ? atoi(ls) : 1;
    const double avail = (double)base_available_ram();
    char b1[32], b2[32];
    if (need * local <= avail) return 0;
    /* what would fit: full activation checkpointing, a smaller batch, more ranks (FSDP); each
     * figure for this machine's ranks, as the need and the budget are */
    const char *mine = local > 1 ? " for this machine's ranks" : "";
    char alt[700] = "";
    size_t at = 0;
    if (o->ac != MODEL_AC_FULL) {
        train_plan_in a = in;
        a.ac = MODEL_AC_FULL;
        const double t = plan_total(&a, &e);
        if (t > 0)
            at += (size_t)snprintf(alt + at, sizeof alt - at,
                                   "; activation_checkpoint.mode = \"full\": %s%s",
                                   size_text(t * local, b1, sizeof b1), mine);
    }
    if (in.ckpt_async) {
        train_plan_in a = in;
        a.ckpt_async = 0;
        const double t = plan_total(&a, &e);
        if (t > 0 && t < need && at < sizeof alt)
            at += (size_t)snprintf(alt + at, sizeof alt - at,
                                   "; checkpoint.async_mode = \"disabled\": %s%s",
                                   size_text(t * local, b1, sizeof b1), mine);
    }
    if (o->batch > 1) {
        train_plan_in a = in;
        a.batch = 1;
        const double t = plan_total(&a, &e);
        if (t > 0 && at < sizeof alt)
            at +=
                (size_t)snprintf(alt + at, sizeof alt - at, "; training.local_batch_size = 1: %s%s",
                                 size_text(t * local, b1, sizeof b1), mine);
    }
    /* more ranks shard the weights and AdamW state (FSDP), not the activations: with the
     * configured settings, else with both savings above; on more machines of this one's size,
     * as many ranks on each as here (more ranks on this machine would share its budget) */
    for (int cheap = 0; cheap < 2; cheap++) {
        train_plan_in a = in;
        if (cheap) {
            a.ac = MODEL_AC_FULL;
            a.batch = 1;
        }
        int w = world * 2;
        double t = -1;
        for (; w <= 1024; w *= 2) {
            a.world = w;
            a.par.dp_shard = -1; /* the added ranks shard */
            if ((t = plan_total(&a, &e)) > 0 && t <= avail / local) break;
        }
        if (w <= 1024 && at < sizeof alt) {
            at += (size_t)snprintf(alt + at, sizeof alt - at,
                                   "; %d ranks%s, %d a machine as now: %s per rank", w,
                                   cheap ? " with both" : "", local, size_text(t, b1, sizeof b1));
            break;
        }
    }
    return base_fail(err,
                     "memory: this run needs about %s%s (titan plan's estimate) but %s is "
                     "available (MemAvailable, and the cgroup limit when there is one)%s; "
                     "training.ignore_memory_check = true (--force) tries anyway",
                     size_text(need * local, b1, sizeof b1),
                     local > 1 ? " for this machine's ranks" : "", size_text(avail, b2, sizeof b2),
                     alt);
}

int train_preflight(const train_opts *o, const dist_mesh *mesh, base_err *err) {
    if (same_config(o, mesh, err) || paths(o, err) || train_param_groups_check(o, err) ||
        train_param_groups_mesh_check(o, mesh->dp_shard, mesh->tp, err) ||
        memory(o, mesh->world, err))
        return -1;
    return 0;
}
