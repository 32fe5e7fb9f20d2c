/* shardswap: the command-line front end. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"generate", cmd_generate, "generate a completion of a prompt"},
    {"tokenize", cmd_tokenize, "print the token ids of the text on stdin"},
    {"forward", cmd_forward, "write the logits of every position of a token sequence"},
    {"gen-model", cmd_gen_model, "write a random-weight OPT checkpoint in Hugging Face layout"},
    {"inspect", cmd_inspect, "describe a checkpoint: config, tensors, bytes"},
    {"bench", cmd_bench, "benchmarks: bench forward, bench swap, bench workload"},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: shardswap COMMAND [flags]   (shardswap COMMAND --help for its flags)\n\n"
               "Runs Hugging Face OPT checkpoints (safetensors) on the CPU.\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (strcmp(argv[1], commands[i].name) == 0) {
            int rc = commands[i].run(argc - 2, argv + 2);
            return rc == EXIT_HELP ? 0 : rc;
        }
    }
    fprintf(stderr, "shardswap: unknown command \"%s\" (expected generate, tokenize, forward, "
                    "gen-model, inspect or bench; see shardswap --help)\n",
            argv[1]);
    return EXIT_USAGE;
}
