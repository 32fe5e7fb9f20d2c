/* The subcommands of `shardswap`. Each takes the arguments after its name
 * and returns the process exit status. */
#ifndef SHARDSWAP_CLI_COMMANDS_H
#define SHARDSWAP_CLI_COMMANDS_H

int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_chat_template(int argc, char **argv);
int cmd_forward(int argc, char **argv);
int cmd_gen_model(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
/* bench swap, dispatched by cmd_bench */
int bench_swap(int argc, char **argv);
int bench_workload(int argc, char **argv);
int bench_serve(int argc, char **argv);
int bench_comm(int argc, char **argv);
int bench_gemv(int argc, char **argv);
int bench_lora(int argc, char **argv);
int bench_tokenize(int argc, char **argv);
int bench_read(int argc, char **argv);

/* A command: its name, what runs it (the arguments after its name; the
 * exit status) and one line of help. */
struct cli_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
};
/* bench's benchmarks, in the order help lists them (cmd_bench.c) */
extern const struct cli_command bench_commands[];
extern const int bench_n_commands;

/* Under mpirun, the job this process is part of (cluster/job.h), opened by
 * main for the commands that run across processes (serve, bench swap,
 * bench workload): process 0 runs the command with it; the others follow
 * in main and never run one. NULL otherwise. */
struct cluster_job;
struct cluster_job *cli_job(void);

#endif
