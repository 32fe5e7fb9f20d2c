/* core/blas_core.h through the binary: with OPENBLAS_CORETYPE unset,
 * shardswap runs the best OpenBLAS core this CPU supports when OpenBLAS
 * itself picked an older one (re-executing itself once), leaves OpenBLAS's
 * own choice alone otherwise, and keeps a core the user set. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/blas_core.h"
#include "test.h"

#define BIN SHARDSWAP_BINARY

static char tmp[64];

/* Runs `shardswap --version` with the environment prefix env (an `env`
 * command's arguments); the core it reports into core, its stderr into err.
 * Returns the exit status. */
static int run_version(const char *env, char *core, size_t core_cap, char *err, size_t err_cap)
{
    char cmd[1024], path[128];
    snprintf(cmd, sizeof(cmd),
             "env -u OPENBLAS_CORETYPE -u SHARDSWAP_BLAS_CORE %s %s --version "
             ">%s/out 2>%s/err",
             env, BIN, tmp, tmp);
    int st = system(cmd);
    core[0] = err[0] = 0;
    snprintf(path, sizeof(path), "%s/out", tmp);
    FILE *f = fopen(path, "r");
    char line[256];
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "openblas core ", 14) == 0)
            snprintf(core, core_cap, "%.*s", (int)strcspn(line + 14, "\n"), line + 14);
    if (f)
        fclose(f);
    snprintf(path, sizeof(path), "%s/err", tmp);
    if ((f = fopen(path, "r"))) {
        size_t n = fread(err, 1, err_cap - 1, f);
        err[n] = 0;
        fclose(f);
    }
    return st;
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static const char *best, *own;

static void setup(void)
{
    test_scratch_dir(tmp, sizeof(tmp), "blas");
    best = blas_core_best();
    /* what OpenBLAS picked in this process, when nobody overrode it */
    own = getenv("OPENBLAS_CORETYPE") ? NULL : blas_core_name();
    printf("this CPU: best core %s; OpenBLAS's own pick %s\n", best ? best : "(none)",
           own ? own : "(overridden here)");
}

/* unset: never Prescott on an AVX2 CPU; the fallback left alone without */
TEST(unset)
{
    char core[64], err[4096];
    CHECK(run_version("", core, sizeof(core), err, sizeof(err)) == 0);
    printf("unset: runs %s\n", core);
    CHECK_MSG(err[0] == 0, "stderr: %s", err);
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) {
        CHECK_MSG(strcmp(core, "Prescott") != 0, "runs %s", core);
        if (own && strcmp(own, "Prescott") == 0)
            CHECK_MSG(best && strcmp(core, best) == 0, "runs %s, wanted %s", core, best);
    } else
#endif
    {
        CHECK_MSG(!own || strcmp(core, own) == 0, "runs %s, OpenBLAS picked %s", core, own);
    }
}

/* the user's choice is kept, and said once when it is older than the best */
TEST(user_choice)
{
    char core[64], err[4096];
    CHECK(run_version("OPENBLAS_CORETYPE=Haswell", core, sizeof(core), err, sizeof(err)) == 0);
    printf("OPENBLAS_CORETYPE=Haswell: runs %s\n", core);
    CHECK_MSG(strcmp(core, "Haswell") == 0, "runs %s", core);
    if (best && strcmp(best, "SkylakeX") == 0)
        CHECK_MSG(count(err, "OPENBLAS_CORETYPE=Haswell") == 1, "stderr: %s", err);
    else
        CHECK_MSG(err[0] == 0, "stderr: %s", err);
}

/* a core a parent chose (both variables inherited): kept, silently, no
 * second re-exec */
TEST(parent_choice)
{
    char core[64], err[4096];
    if (best) {
        char env[128];
        snprintf(env, sizeof(env), "OPENBLAS_CORETYPE=%s SHARDSWAP_BLAS_CORE=%s", best, best);
        CHECK(run_version(env, core, sizeof(core), err, sizeof(err)) == 0);
        CHECK_MSG(strcmp(core, best) == 0, "runs %s", core);
        CHECK_MSG(err[0] == 0, "stderr: %s", err);
    }
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
