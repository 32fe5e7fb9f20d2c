/* shardswap: the command-line front end. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cluster/job.h"
#include "comm/mpi.h"
#include "core/blas_core.h"
#include "core/error.h"

static struct cluster_job *job;

struct cluster_job *cli_job(void)
{
    return job;
}

/* The commands that run across processes with the engine's job (bench
 * comm opens its own world). */
static bool runs_across(int argc, char **argv)
{
    if (strcmp(argv[1], "serve") == 0)
        return true;
    return strcmp(argv[1], "bench") == 0 && argc > 2 &&
           (strcmp(argv[2], "swap") == 0 || strcmp(argv[2], "workload") == 0);
}

/* A process other than 0 of such a job: it follows process 0's stacks
 * until process 0 closes the job. SIGINT and SIGTERM, which mpirun passes
 * to every process, are process 0's to act on. */
static int follow(void)
{
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    int rc = cluster_job_follow(job);
    cluster_job_close(job);
    return rc < 0 ? 1 : 0;
}

static const struct cli_command commands[] = {
    {"serve", cmd_serve,
     "serve models over HTTP (OpenAI API: completions and chat completions), many at once "
     "by swapping"},
    {"generate", cmd_generate, "generate a completion of a prompt"},
    {"tokenize", cmd_tokenize, "print the token ids of the text on stdin"},
    {"chat-template", cmd_chat_template,
     "print the prompt a model's chat template renders from a request on stdin"},
    {"forward", cmd_forward, "write the logits of every position of a token sequence"},
    {"gen-model", cmd_gen_model,
     "write a random-weight checkpoint (OPT or Llama family) in Hugging Face layout"},
    {"inspect", cmd_inspect, "describe a checkpoint: config, tensors, bytes"},
    {"bench", cmd_bench, "benchmarks (shardswap bench NAME --help):"},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: shardswap COMMAND [flags]   (shardswap COMMAND --help for its flags)\n\n"
               "Runs Hugging Face checkpoints (safetensors) of the OPT and Llama families (Llama, Mistral,\n"
               "Qwen2) on CPUs and NVIDIA GPUs, and serves many of them at once by swapping.\n"
               "shardswap --version prints the version, the OpenBLAS core and the GEMV ISA in use.\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-15s %s\n", commands[i].name, commands[i].help);
    for (int i = 0; i < bench_n_commands; i++)
        fprintf(f, "    bench %-9s %s\n", bench_commands[i].name, bench_commands[i].help);
}

/* A command's output is its result: when stdout could not take all of it (a
 * full disk, a quota) the command fails, saying so, rather than exit 0 with a
 * truncated result. cmd names the command for the message. */
static int stdout_check(const char *cmd)
{
    errno = 0; /* what a failed flush leaves here is the reason */
    if (fflush(stdout) == 0 && !ferror(stdout))
        return 0;
    fprintf(stderr, "shardswap%s%s: writing to stdout: %s\n", cmd ? " " : "", cmd ? cmd : "",
            strerror(errno ? errno : EIO));
    return 1;
}

int main(int argc, char **argv)
{
    /* OpenBLAS's kernels for this CPU: may re-execute this binary */
    blas_core_check(argv);
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return stdout_check(NULL);
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("shardswap %s\nopenblas core %s\ngemv %s\n", SHARDSWAP_VERSION, blas_core_name(),
               cpu_gemv_kernels());
        printf("matmul %s\nonednn %s\n", cpu_matmul_paths(), cpu_matmul_onednn());
        printf("mpi %s\n", mpi_built() ? "built" : "not built");
        return stdout_check(NULL);
    }
    /* N processes of one command would each serve, load and print on their
     * own: refuse what does not run across processes yet. */
    int procs = mpi_launched();
    bool across = procs > 1 && runs_across(argc, argv);
    if (procs > 1 && !across &&
        !(strcmp(argv[1], "bench") == 0 && argc > 2 && strcmp(argv[2], "comm") == 0)) {
        fprintf(stderr,
                "shardswap: started by mpirun as %d processes, but only \"serve\", \"bench "
                "swap\", \"bench workload\" and \"bench comm\" run across processes; run "
                "\"%s\" without mpirun\n",
                procs, argv[1]);
        return EXIT_USAGE;
    }
    if (across) {
        /* every process reads the same environment (mpirun -x passes it on) */
        struct cluster_job_config jc = {0};
        const char *beat = getenv("SHARDSWAP_HEARTBEAT_TIMEOUT");
        if (beat && *beat) {
            char *end;
            jc.beat_timeout_s = strtod(beat, &end);
            if (*end || !(jc.beat_timeout_s > 0)) {
                fprintf(stderr, "shardswap: SHARDSWAP_HEARTBEAT_TIMEOUT=%s: expected seconds > 0\n",
                        beat);
                return EXIT_USAGE;
            }
            jc.beat_interval_s = jc.beat_timeout_s / 10;
        }
        if (cluster_job_open(&jc, &job) < 0) {
            fprintf(stderr, "shardswap: %s\n", err_msg());
            return 1;
        }
        if (cluster_job_proc(job) > 0)
            return follow();
    }
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (strcmp(argv[1], commands[i].name) == 0) {
            int rc = commands[i].run(argc - 2, argv + 2);
            cluster_job_close(job); /* the followers leave */
            job = NULL;
            if (rc != 0 && rc != EXIT_HELP)
                return rc; /* it said why; a write error on top changes nothing */
            /* "bench swap", not just "bench" */
            const char *sub =
                strcmp(argv[1], "bench") == 0 && argc > 2 && argv[2][0] != '-' ? argv[2] : NULL;
            char name[64];
            snprintf(name, sizeof(name), "%s%s%.40s", argv[1], sub ? " " : "", sub ? sub : "");
            return stdout_check(name);
        }
    }
    fprintf(stderr, "shardswap: unknown command \"%s\" (expected ", argv[1]);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(stderr, "%s%s",
                i == 0                ? ""
                : i + 1 == N_COMMANDS ? " or "
                                      : ", ",
                commands[i].name);
    fprintf(stderr, "; see shardswap --help)\n");
    return EXIT_USAGE;
}
