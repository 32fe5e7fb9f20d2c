/* bench serve against the real server, end to end: `shardswap serve` on two
 * generated models (opt-125m's shape cut to one layer, the committed OPT
 * tokenizer), a short custom workload replayed over HTTP with --json, its
 * CSV and plot, --stream, and --compare of two runs. Skipped when no port
 * on 127.0.0.1 can be had. */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#define BIN SHARDSWAP_BINARY
#define OPT_TOKENIZER SHARDSWAP_SOURCE_DIR "/data/tokenizer/opt"

static char tmp[64];

/* Runs cmd with stdout into out (cap bytes); returns its exit status. */
static int run(const char *cmd, char *out, size_t cap)
{
    char full[4096], path[128];
    snprintf(path, sizeof(path), "%s/out", tmp);
    snprintf(full, sizeof(full), "%s >%s 2>%s/err", cmd, path, tmp);
    int st = system(full);
    FILE *f;
    if (out && (f = fopen(path, "rb"))) {
        size_t n = fread(out, 1, cap - 1, f);
        out[n] = 0;
        fclose(f);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void ms_sleep(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The server in a child process; its port once it listens (0: it did not). */
static pid_t server_start(int *port)
{
    char portfile[128], m0[160], m1[160], log[128];
    snprintf(portfile, sizeof(portfile), "%s/port", tmp);
    snprintf(m0, sizeof(m0), "a=%s/m0", tmp);
    snprintf(m1, sizeof(m1), "b=%s/m1", tmp);
    snprintf(log, sizeof(log), "%s/serve.log", tmp);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(log, "w", stderr))
            _exit(127);
        execl(BIN, BIN, "serve", "--model", m0, "--model", m1, "--port", "0", "--port-file",
              portfile, "--log-level", "warn", (char *)NULL);
        _exit(127);
    }
    *port = 0;
    for (int i = 0; i < 200 && *port == 0; i++) {
        FILE *f = fopen(portfile, "r");
        if (f) {
            if (fscanf(f, "%d", port) != 1)
                *port = 0;
            fclose(f);
        }
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return -1;
        if (*port == 0)
            ms_sleep(50);
    }
    return pid;
}

static json_t *parse(const char *out)
{
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    CHECK_MSG(j != NULL, "not JSON (%s): %.200s", e.text, out);
    return j;
}

static pid_t pid = -1;
static int port;
static char out[1 << 16];

/* Stops the server if a case has not, and removes the scratch tree. */
static void cleanup(void)
{
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
}

/* Two generated models and a server over them, for every case. */
static void setup(void)
{
    snprintf(tmp, sizeof(tmp), "/tmp/shardswap_bserve_XXXXXX");
    if (!mkdtemp(tmp))
        test_skip("mkdtemp failed");
    atexit(cleanup);
    char cmd[2048];
    for (int s = 0; s < 2; s++) {
        snprintf(cmd, sizeof(cmd),
                 "%s gen-model --preset opt-125m --layers 1 --seed %d --tokenizer-from %s --out "
                 "%s/m%d",
                 BIN, s, OPT_TOKENIZER, tmp, s);
        CHECK_MSG(run(cmd, NULL, 0) == 0, "%s", cmd);
    }
    pid = server_start(&port);
    if (pid < 0 || port == 0)
        test_skip("the server did not start (no port on 127.0.0.1?)");
}

/* a run: every request answered, the names from /v1/models, CSV and plot
 * written; then the same arrivals, streamed: the same count, a time to
 * first token */
TEST(run_and_stream)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "%s bench serve --url http://127.0.0.1:%d --config custom --rates 8,4 --duration 1.5 "
             "--seed 3 --label one --out-dir %s/o --json",
             BIN, port, tmp);
    CHECK_MSG(run(cmd, out, sizeof(out)) == 0, "%s", cmd);
    json_t *j = parse(out);
    json_t *p = json_array_get(json_object_get(j, "policies"), 0);
    json_int_t sent = json_integer_value(json_object_get(j, "requests_sent"));
    CHECK(sent > 3);
    CHECK(json_integer_value(json_object_get(p, "requests")) == sent);
    CHECK(json_integer_value(json_object_get(p, "failed")) == 0);
    CHECK(json_integer_value(json_object_get(json_object_get(p, "http"), "ok")) == sent);
    CHECK(json_integer_value(json_object_get(json_object_get(p, "http"), "connections")) >= 1);
    CHECK(json_number_value(json_object_get(p, "p50_s")) > 0);
    CHECK(json_number_value(json_object_get(j, "warm_latency_s")) > 0);
    CHECK(json_is_integer(json_object_get(p, "swaps")));
    json_t *names = json_object_get(j, "model_names");
    CHECK(json_array_size(names) == 2 &&
          strcmp(json_string_value(json_array_get(names, 0)), "a") == 0 &&
          strcmp(json_string_value(json_array_get(names, 1)), "b") == 0);
    const char *csv = json_string_value(json_object_get(p, "csv"));
    struct stat st;
    CHECK(csv && stat(csv, &st) == 0 && st.st_size > 0);
    CHECK(stat(json_string_value(json_object_get(j, "plot")), &st) == 0);
    json_decref(j);

    snprintf(cmd, sizeof(cmd),
             "%s bench serve --url http://127.0.0.1:%d --config custom --rates 8,4 --duration 1.5 "
             "--seed 3 --label two --stream --models b,a --out-dir %s/o --json",
             BIN, port, tmp);
    CHECK_MSG(run(cmd, out, sizeof(out)) == 0, "%s", cmd);
    j = parse(out);
    p = json_array_get(json_object_get(j, "policies"), 0);
    CHECK(json_integer_value(json_object_get(j, "requests_sent")) == sent);
    CHECK(json_integer_value(json_object_get(p, "requests")) == sent);
    CHECK(json_number_value(json_object_get(p, "ttft_p50_s")) > 0);
    CHECK(strcmp(json_string_value(json_array_get(json_object_get(j, "model_names"), 0)), "b") ==
          0);
    json_decref(j);
}

/* a model the server does not have: every request counted as a 404, none lost */
TEST(unknown_model)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "%s bench serve --url http://127.0.0.1:%d --config custom --rates 5 --duration 1 "
             "--models nope --slo 1 --warm-requests 0 --label bad --out-dir %s/o --json",
             BIN, port, tmp);
    CHECK_MSG(run(cmd, out, sizeof(out)) == 0, "%s", cmd);
    json_t *j = parse(out);
    json_t *p = json_array_get(json_object_get(j, "policies"), 0);
    json_int_t bad = json_integer_value(json_object_get(j, "requests_sent"));
    CHECK(json_integer_value(json_object_get(p, "failed")) == bad);
    CHECK(json_integer_value(json_object_get(json_object_get(p, "http"), "status_4xx")) == bad);
    json_decref(j);
}

/* side by side, from the files */
TEST(compare)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "%s bench serve --url http://127.0.0.1:%d --config custom --rates 8,4 --duration 1.5 "
             "--seed 3 --label one --out-dir %s/o --json > %s/one.json 2>/dev/null && "
             "%s bench serve --url http://127.0.0.1:%d --config custom --rates 8,4 --duration 1.5 "
             "--seed 3 --label two --out-dir %s/o --json > %s/two.json 2>/dev/null",
             BIN, port, tmp, tmp, BIN, port, tmp, tmp);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof(cmd), "%s bench serve --compare %s/one.json,%s/two.json --plot %s/c.svg",
             BIN, tmp, tmp, tmp);
    CHECK_MSG(run(cmd, out, sizeof(out)) == 0, "%s", cmd);
    CHECK(strstr(out, "one ") && strstr(out, "two ") && strstr(out, "p50 ratio"));
    char svg[160];
    struct stat st;
    snprintf(svg, sizeof(svg), "%s/c.svg", tmp);
    CHECK(stat(svg, &st) == 0 && st.st_size > 0);
}

/* SIGTERM: the server exits 0 (the last case: it stops the server) */
TEST(sigterm)
{
    int status = 0;
    kill(pid, SIGTERM);
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "server status %d", status);
    pid = -1;
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
