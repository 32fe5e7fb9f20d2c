/* The Jinja engine (template/jinja.h) and chat templates (template/chat.h):
 * unit tests of the language against what Jinja2 3.1 renders under
 * transformers' settings, then the differential corpus
 * (tests/fixtures/chat_templates: 70 real templates x 10 conversations x
 * add_generation_prompt, rendered by transformers 5.24): every case must
 * render exactly, or fail as transformers fails, except the templates in
 * known_failures below. Prints the corpus table. */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "template/chat.h"
#include "template/jinja.h"
#include "test.h"

#define CORPUS SHARDSWAP_SOURCE_DIR "/tests/fixtures/chat_templates"

/* Templates whose cases may differ, and why. Empty when every case matches. */
static const struct {
    const char *name;
    const char *why;
} known_failures[] = {
    {NULL, NULL},
};

static int render_vars(const char *src, json_t *vars, const struct jinja_limits *lim, char **out,
                       int *rc_out)
{
    struct jinja_template *t = NULL;
    int rc = jinja_parse("template", src, strlen(src), &t);
    if (rc == 0) {
        rc = jinja_render(t, vars, 1772698147, lim, out, NULL);
        jinja_free(t);
    }
    *rc_out = rc;
    return rc;
}

/* Renders src with messages [{"role": "user", "content": "hi"}] and a few
 * variables, and checks the output (or, want NULL, that it fails with
 * want_rc and a message containing want_msg). */
static void expect_full(int line, const char *src, const char *want, int want_rc,
                        const char *want_msg, const struct jinja_limits *lim)
{
    json_error_t je;
    json_t *vars =
        json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                   "\"d\": {\"a\": 1, \"b\": [1, 2.5, \"x\", null, true]}, "
                   "\"s\": \"Hello World\", \"n\": null, \"e\": [], \"u\": \"h\\u00e9llo\"}",
                   0, &je);
    char *out = NULL;
    int rc;
    render_vars(src, vars, lim, &out, &rc);
    if (want) {
        CHECK_MSG(rc == 0 && out && strcmp(out, want) == 0,
                  "line %d: %s\n  want [%s]\n  got  [%s] (rc %d: %s)", line, src, want,
                  out ? out : "", rc, rc ? err_msg() : "");
    } else {
        CHECK_MSG(rc == want_rc && strstr(err_msg(), want_msg),
                  "line %d: %s\n  want error %d containing [%s]\n  got rc %d [%s] out [%s]", line,
                  src, want_rc, want_msg, rc, err_msg(), out ? out : "");
    }
    free(out);
    json_decref(vars);
}

#define EXPECT(src, want) expect_full(__LINE__, src, want, 0, NULL, NULL)
#define EXPECT_ERR(src, rc, msg) expect_full(__LINE__, src, NULL, rc, msg, NULL)

TEST(whitespace)
{
    EXPECT("a\n{% if true %}\nb\n{% endif %}\nc", "a\nb\nc");
    EXPECT("a\n    {% if true %}\n  b\n    {% endif %}\nc", "a\n  b\nc"); /* lstrip_blocks */
    EXPECT("  {{ 'x' }}  ", "  x  ");                                     /* not for {{ }} */
    EXPECT("a  {%- if true %} b {% endif -%}  c", "a b c");
    EXPECT("a {{- 'x' -}} b", "axb");
    EXPECT("  {%+ if true %}x{% endif %}", "  x"); /* {%+ keeps */
    EXPECT("{% if true +%}\nx{% endif %}", "\nx"); /* +%} keeps the newline */
    EXPECT("a\n  {# c #}\nb", "a\nb");             /* comments too */
    EXPECT("a {#- c -#} b", "ab");
    EXPECT("x\n", "x"); /* one trailing newline */
    EXPECT("x\n\n", "x\n");
    EXPECT("a\r\nb", "a\nb");
    EXPECT("{% raw %}{{ x }}{% endraw %}", "{{ x }}");
    EXPECT("{% if true %}  x{% endif %}", "  x");
    EXPECT("  {% if true %}x\n  {% endif %}y", "x\ny");
}

TEST(expressions)
{
    EXPECT("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 10 / 4 }}",
           "7 3 -4 2 1024 2.5");
    EXPECT("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-5 }} {{ 3.0 * 2 }}",
           "1.0 0.30000000000000004 1e+20 1.5e-05 6.0");
    EXPECT("{{ true }} {{ none }} {{ True and False }} {{ 0 or 'x' }}", "True None False x");
    EXPECT("{{ [1, 'a', none] }} {{ {'k': 'v'} }} {{ (1,) }} {{ d }}",
           "[1, 'a', None] {'k': 'v'} (1,) {'a': 1, 'b': [1, 2.5, 'x', None, True]}");
    EXPECT("{{ \"it's\" }} {{ [\"it's\"] }} {{ ['a\\nb'] }}", "it's [\"it's\"] ['a\\nb']");
    EXPECT(
        "{{ 'abc'[::-1] }} {{ 'abcdef'[1:3] }} {{ [1,2,3][-1] }} {{ [1,2,3,4][::2] }} {{ u[1:] }}",
        "cba bc 3 [1, 3] éllo");
    EXPECT("{{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ [1] + [2] }}", "a1None ababab [1, 2]");
    EXPECT("{{ 'x' if false }}|{{ 'y' if n is none else 'z' }}", "|y");
    EXPECT("{{ 1 < 2 < 3 }} {{ 'b' in 'abc' }} {{ 3 not in [1, 2] }} {{ 1 == 1.0 }}",
           "True True True True");
    EXPECT("{{ d.a }} {{ d['b'][2] }} {{ d.missing }}|{{ d.b.0 }}", "1 x |1");
    EXPECT("{{ 'a\\tb\\u00e9\\x41' }}", "a\tbéA");
    EXPECT("{{ 'a' 'b' }}", "ab");
    EXPECT("{{ messages[0]['role'] }}{{ messages[0].content }}", "userhi");
    EXPECT_ERR("{{ x.y }}", ERR_INVALID, "template line 1: 'x' is undefined");
    EXPECT_ERR("\n\n{{ 1 + 'a' }}", ERR_INVALID, "line 3: unsupported operand");
    EXPECT_ERR("{{ 1 / 0 }}", ERR_INVALID, "division by zero");
}

TEST(statements)
{
    EXPECT("{% for x in [1, 2, 3] %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}"
           "{{ loop.last }}{{ loop.length }}{{ loop.revindex }};{% endfor %}",
           "01TrueFalse33;12FalseFalse32;23FalseTrue31;");
    EXPECT("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}",
           "-2;1-3;2-;");
    EXPECT("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
           "a=1;b=[1, 2.5, 'x', None, True];");
    EXPECT("{% for x in e %}x{% else %}empty{% endfor %}", "empty");
    EXPECT("{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{% endfor %}", "aba");
    EXPECT("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}", "2242");
    EXPECT("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}"
           "{% break %}{% endif %}{{ x }}{% endfor %}",
           "1");
    /* a loop body is a fresh scope every iteration; outer names unchanged */
    EXPECT("{% set y = 5 %}{% for x in [1, 2] %}{{ y }}{% set y = x %}{% endfor %}{{ y }}", "555");
    EXPECT("{% set ns = namespace(n=0) %}{% for x in [1, 2, 3] %}{% set ns.n = ns.n + x %}"
           "{% endfor %}{{ ns.n }}",
           "6");
    EXPECT("{% set a, b = 1, 2 %}{{ a }}{{ b }}", "12");
    EXPECT("{% set x %}in {{ 1 }}{% endset %}[{{ x }}]", "[in 1]");
    EXPECT("{% macro m(a, b='d') %}({{ a }},{{ b }}){% endmacro %}{{ m(1) }}{{ m(2, b=3) }}",
           "(1,d)(2,3)");
    EXPECT("{% macro v(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, k=3) }}",
           "1(2,){'k': 3}");
    EXPECT("{% for j in [5, 6] %}{% macro m() %}{{ j }}{% endmacro %}{{ m() }}{% endfor %}", "56");
    EXPECT_ERR("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", ERR_INVALID, "takes not more than 1");
    EXPECT_ERR("{% break %}", ERR_FORMAT, "'break' outside a for loop");
    EXPECT("{% filter upper %}abc{% endfilter %}", "ABC");
    EXPECT("{% generation %}gen{% endgeneration %}", "gen");
    EXPECT("{% if n %}a{% elif s %}b{% else %}c{% endif %}", "b");
    EXPECT_ERR("{% for x in y %}", ERR_FORMAT, "never closed");
    EXPECT_ERR("\n{% include 'x' %}", ERR_UNSUPPORTED,
               "template line 2: statement \"include\" is not supported");
    EXPECT_ERR("{{ raise_exception('no way') }}", JINJA_RAISED, "no way");
    EXPECT_ERR("{% set ns = namespace(_x=1) %}", ERR_INVALID, "underscore");
    EXPECT_ERR("{{ [1].append(2) }}", ERR_INVALID,
               "access to attribute 'append' of 'list' object is unsafe");
}

TEST(filters)
{
    EXPECT("{{ ' a '|trim }}|{{ s|length }}|{{ u|length }}|{{ s|upper }}|{{ s|lower }}|{{ 'ab "
           "cd'|title }}",
           "a|11|5|HELLO WORLD|hello world|Ab Cd");
    EXPECT("{{ d|tojson }} {{ 'é\"'|tojson }} {{ d|tojson(indent=2) }}",
           "{\"a\": 1, \"b\": [1, 2.5, \"x\", null, true]} \"é\\\"\" "
           "{\n  \"a\": 1,\n  \"b\": [\n    1,\n    2.5,\n    \"x\",\n    null,\n    true\n  ]\n}");
    EXPECT("{{ x|default('dflt') }} {{ ''|default('e', true) }} {{ [1, 2]|join(', ') }} "
           "{{ [3, 1, 2]|sort }} {{ [1, 2, 1]|unique|list }} {{ {'b': 1, 'a': 2}|dictsort }}",
           "dflt e 1, 2 [1, 2, 3] [1, 2] [('a', 2), ('b', 1)]");
    EXPECT("{{ [{'t': 'a', 'v': 1}, {'t': 'b'}]|selectattr('t', 'equalto', "
           "'a')|map(attribute='v')|list }}"
           "{{ [1, 2, 3]|reject('equalto', 2)|list }}{{ [1, 2]|first }}{{ [1, 2]|last }}",
           "[1][1, 3]12");
    EXPECT("{{ 'a\nb'|indent(2) }}|{{ 'a\nb'|indent(2, first=true) }}", "a\n  b|  a\n  b");
    EXPECT("{{ '3'|int + 1 }} {{ 2.7|int }} {{ '1.5'|float }} {{ -3|abs }} {{ 2.5|round }}",
           "4 2 1.5 3 2.0");
    EXPECT("{{ 'a,b,,c'.split(',') }} {{ ' a b '.split() }} {{ 'a b c'.split(' ', 1) }}",
           "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c']");
    EXPECT("{{ 'xxhixx'.strip('x') }} {{ s.startswith('He') }} {{ s.endswith(('x', 'ld')) }} "
           "{{ s.replace('o', '0') }} {{ '{} {}'.format(1, 'a') }} {{ s.find('W') }}",
           "hi True True Hell0 W0rld 1 a 6");
    EXPECT("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 3) }} {{ d.keys()|list }}",
           "1 None 3 ['a', 'b']");
    EXPECT("{{ 'a' is string }} {{ d is mapping }} {{ e is iterable }} {{ 1 is number }} "
           "{{ x is defined }} {{ n is none }} {{ 3 is odd }} {{ 4 is divisibleby 2 }}",
           "True True True True False True True True");
    EXPECT("{{ '%s-%d' % ('a', 3) }} {{ strftime_now('%Y-%m-%d') }} {{ range(3)|list }}",
           "a-3 2026-03-05 [0, 1, 2]");
    EXPECT_ERR("\n\n\n{{ x|wordwrap }}", ERR_UNSUPPORTED,
               "template line 4: filter \"wordwrap\" is not supported");
    EXPECT_ERR("{{ x is foo }}", ERR_UNSUPPORTED, "test \"foo\" is not supported");
}

TEST(limits)
{
    struct jinja_limits small = {.max_output = 100};
    expect_full(__LINE__, "{% for i in range(1000) %}xx{% endfor %}", NULL, ERR_INVALID,
                "output longer than 100 bytes", &small);
    struct jinja_limits loops = {.max_loops = 1000};
    expect_full(__LINE__,
                "{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", NULL,
                ERR_INVALID, "loop iterations (limit)", &loops);
    EXPECT_ERR("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", ERR_INVALID,
               "nested deeper than 64");
    EXPECT_ERR("{{ range(1000000)|length }}", ERR_INVALID, "MAX_RANGE");
    EXPECT_ERR("{{ 'x' * 100000000 }}", ERR_INVALID, "limit");
    struct jinja_limits steps = {.max_steps = 1000};
    expect_full(__LINE__, "{% for i in range(1000) %}{{ i }}{% endfor %}", NULL, ERR_INVALID,
                "evaluation steps", &steps);
    /* s = s ~ x in a loop appends in place: 2000 x 2 KiB in well under the
       default 256 MiB (copying would need 4 GB) */
    EXPECT("{% set ns = namespace(s='') %}{% for i in range(2000) %}{% set ns.s = ns.s ~ ('x' * "
           "2048) ~ "
           "'' %}{% set keep = ns.s %}{% endfor %}{{ ns.s|length }}",
           "4096000");
    EXPECT("{% set a = 'ab' %}{% set b = a ~ 'c' %}{% set c = a ~ 'd' %}{% set d = b ~ 'e' %}"
           "{{ a }}{{ b }}{{ c }}{{ d }}",
           "ababcabdabce");
    /* a value nested deeper than repr recurses */
    EXPECT_ERR("{% set ns = namespace(l=[]) %}{% for i in range(300) %}{% set ns.l = [ns.l] %}"
               "{% endfor %}{{ ns.l }}",
               ERR_INVALID, "nested deeper than 200");
    /* substring search is linear (memmem), not needle x haystack */
    EXPECT("{% set a = 'a' * 2000000 %}{% set b = 'a' * 1000000 ~ 'b' %}{{ b in a }}"
           "{{ a.count(b) }}{{ a.replace(b, 'x')|length }}{{ a.split(b)|length }}",
           "False020000001");
    /* deep nesting fails at parse, not on the stack */
    char deep[2100];
    memset(deep, '(', 1000);
    strcpy(deep + 1000, "1");
    memset(deep + 1001, ')', 1000);
    deep[2001] = 0;
    char src[2200];
    snprintf(src, sizeof(src), "{{ %s }}", deep);
    EXPECT_ERR(src, ERR_INVALID, "nesting deeper");
}

TEST(python_semantics)
{
    /* select/map give generators: iterable, always true, no len, not JSON */
    EXPECT("{% if e|select %}t{% endif %}{{ [1, 2]|map('string')|join }}{{ [1]|select|list }}",
           "t12[1]");
    EXPECT_ERR("{{ [1]|select|length }}", ERR_INVALID, "has no len()");
    EXPECT_ERR("{{ [1]|map('string')|tojson }}", ERR_INVALID, "not JSON serializable");
    /* |safe gives a Markup: a plain str added to it is escaped */
    EXPECT("{{ ('<a>'|safe) + '<b>' }}|{{ '<b>' ~ ('<a>'|safe) }}|{{ '<'|e }}",
           "<a>&lt;b&gt;|<b><a>|&lt;");
    /* the sandbox refuses mutation; attribute errors name the value */
    EXPECT_ERR("{{ d.update({}) }}", ERR_INVALID, "unsafe");
    EXPECT("{{ 'HÉllo'|lower }}{{ 'é'|upper }}{{ 'x'.center(5) }}|", "hélloÉ  x  |");
    EXPECT("{{ 'aXbX'.rsplit('X', 1) }}{{ 'a b'.rfind('b') }}{{ 'abc'.count('') }}",
           "['aXb', '']24");
}

/* chat.c: what transformers gives the template besides the engine */
TEST(chat)
{
    const char *src =
        "{{ bos_token }}{% for m in messages %}{{ m|tojson }};{% endfor %}"
        "{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}{{ eos_token }}";
    struct chat_template *ct = NULL;
    CHECK(chat_template_parse(src, strlen(src), "<s>", NULL, &ct) == 0);
    if (!ct)
        return;
    CHECK(strcmp(chat_template_bos(ct), "<s>") == 0 && strcmp(chat_template_eos(ct), "") == 0);
    json_t *msgs =
        json_loads("[{\"role\": \"user\", \"content\": null, \"x\": 1}, "
                   "{\"role\": \"assistant\", \"content\": \"a\", \"reasoning\": \"r\"}]",
                   0, NULL);
    char *out = NULL;
    struct chat_render_opts o = {.add_generation_prompt = true};
    CHECK(chat_template_render(ct, msgs, &o, &out, NULL) == 0);
    /* nulls dropped; reasoning copied to thinking (first) and reasoning_content (last) */
    const char *want =
        "<s>{\"role\": \"user\", \"x\": 1};{\"thinking\": \"r\", \"role\": \"assistant\", "
        "\"content\": \"a\", \"reasoning\": \"r\", \"reasoning_content\": \"r\"};TrueTrueTrue";
    CHECK_MSG(out && strcmp(out, want) == 0, "got [%s]\nwant [%s]", out ? out : "", want);
    free(out);
    out = NULL;
    json_t *bad = json_loads("[1]", 0, NULL);
    CHECK(chat_template_render(ct, bad, &o, &out, NULL) == ERR_INVALID && !out);
    json_decref(bad);
    json_decref(msgs);
    chat_template_free(ct);
    chat_template_free(NULL);

    /* kwargs: more variables, not the ones transformers sets itself */
    src = "{{ enable_thinking }}";
    CHECK(chat_template_parse(src, strlen(src), NULL, NULL, &ct) == 0);
    json_t *kw = json_pack("{s:b}", "enable_thinking", 0), *none = json_array();
    struct chat_render_opts ko = {.kwargs = kw};
    CHECK(ct && chat_template_render(ct, none, &ko, &out, NULL) == 0 && strcmp(out, "False") == 0);
    free(out);
    out = NULL;
    json_object_set_new(kw, "tools", json_array());
    CHECK(ct && chat_template_render(ct, none, &ko, &out, NULL) == ERR_INVALID && !out &&
          strstr(err_msg(), "may not set \"tools\""));
    json_decref(kw);
    json_decref(none);
    chat_template_free(ct);

    /* a raise is CHAT_RAISED with the template's own message */
    src = "{{ raise_exception('Conversation roles must alternate "
          "user/assistant/user/assistant/...') }}";
    CHECK(chat_template_parse(src, strlen(src), NULL, NULL, &ct) == 0);
    json_t *empty = json_array();
    CHECK(ct && chat_template_render(ct, empty, NULL, &out, NULL) == CHAT_RAISED &&
          strcmp(err_msg(),
                 "Conversation roles must alternate user/assistant/user/assistant/...") == 0);
    chat_template_free(ct);
    /* the output limit */
    src = "{% for i in range(100) %}xxxxxxxxxx{% endfor %}";
    CHECK(chat_template_parse(src, strlen(src), NULL, NULL, &ct) == 0);
    struct chat_render_opts small = {.max_output = 999};
    CHECK(ct && chat_template_render(ct, empty, &small, &out, NULL) == ERR_INVALID &&
          strstr(err_msg(), "output longer than 999 bytes"));
    chat_template_free(ct);
    json_decref(empty);
    /* a parse error names the line; a missing directory's template is none */
    src = "a\n{% if x %}\n{% endfor %}";
    CHECK(chat_template_parse(src, strlen(src), NULL, NULL, &ct) == ERR_FORMAT &&
          strstr(err_msg(), "chat template line 3") && !ct);
    CHECK(chat_template_load("/nonexistent-dir", NULL, &ct) == 0 && !ct);
    CHECK(chat_template_load("/nonexistent-dir", "/nonexistent-dir/t.jinja", &ct) ==
              ERR_NOT_FOUND &&
          strstr(err_msg(), "/nonexistent-dir/t.jinja"));
}

struct shared_render {
    const struct chat_template *ct;
    json_t *msgs;
    const char *want;
    int bad;
};

static void *render_thread(void *arg)
{
    struct shared_render *s = arg;
    for (int i = 0; i < 40; i++) {
        char *out = NULL;
        struct chat_render_opts o = {.add_generation_prompt = i % 2 == 0};
        int rc = chat_template_render(s->ct, s->msgs, &o, &out, NULL);
        if (i % 2 == 0 && (rc != 0 || strcmp(out, s->want) != 0))
            s->bad++;
        free(out);
    }
    return NULL;
}

/* Template files are read as the other model files are: a FIFO or a file
 * that is not UTF-8 is refused, naming the file (and the byte offset), the
 * override and the directory's chat_template.jinja alike. */
static void write_bytes(const char *path, const char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, n, f) == n);
    if (f)
        fclose(f);
}

TEST(template_files)
{
    char dir[] = "/tmp/shardswap-tmplXXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256], want[320];
    snprintf(path, sizeof(path), "%s/chat_template.jinja", dir);
    struct chat_template *ct = NULL;
    /* valid UTF-8 (2-, 3- and 4-byte characters) loads */
    static const char ok[] = "\xc3\xa9\xe2\x98\x83\xf0\x9f\x98\x80{{ messages[0].content }}";
    write_bytes(path, ok, sizeof(ok) - 1);
    CHECK(chat_template_load(dir, NULL, &ct) == 0 && ct);
    chat_template_free(ct);
    /* a stray byte, a surrogate's encoding, a truncated sequence at the end */
    static const struct {
        const char *b;
        size_t n, at;
    } bad[] = {{"ab{{\xff}}", 7, 4}, {"x\xed\xa0\x80y", 5, 1}, {"{{ 1 }}\xe2\x98", 9, 7}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_bytes(path, bad[i].b, bad[i].n);
        snprintf(want, sizeof(want), "%s: invalid UTF-8 at byte %zu", path, bad[i].at);
        ct = NULL;
        CHECK_MSG(chat_template_load(dir, NULL, &ct) == ERR_FORMAT && !ct &&
                      strstr(err_msg(), want),
                  "case %zu: %s", i, err_msg());
        CHECK(chat_template_load("/nonexistent-dir", path, &ct) == ERR_FORMAT &&
              strstr(err_msg(), want));
        char *text = NULL;
        size_t len = 1;
        CHECK(chat_template_read(path, &text, &len) == ERR_FORMAT && !text && len == 0);
    }
    /* a FIFO is refused before it is opened for reading (no hang) */
    unlink(path);
    CHECK(mkfifo(path, 0600) == 0);
    CHECK_MSG(chat_template_load(dir, NULL, &ct) == ERR_IO && strstr(err_msg(), "is a FIFO") &&
                  strstr(err_msg(), "chat_template.jinja"),
              "%s", err_msg());
    unlink(path);
    rmdir(dir);
}

/* One template rendered by several threads at once gives every thread the
 * single-threaded text (the struct is shared read-only; renders own their
 * arenas; error messages are per thread). */
TEST(threads)
{
    const char *src =
        "{% for m in messages %}{{ '<|' + m.role + '|>' + m.content|trim }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}";
    struct chat_template *ct = NULL;
    CHECK(chat_template_parse(src, strlen(src), NULL, NULL, &ct) == 0);
    json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": \" hi \"}]", 0, NULL);
    struct shared_render s[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        s[i] = (struct shared_render){ct, msgs, "<|user|>hi<|assistant|>", 0};
        CHECK(pthread_create(&th[i], NULL, render_thread, &s[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(s[i].bad == 0, "thread %d: %d renders differ", i, s[i].bad);
    }
    json_decref(msgs);
    chat_template_free(ct);
}

/* ---- the corpus ---- */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    fclose(f);
    if (s) {
        s[n] = 0;
        *len = (size_t)n;
    }
    return s;
}

static const char *known_failure(const char *name)
{
    for (size_t i = 0; known_failures[i].name; i++)
        if (strcmp(known_failures[i].name, name) == 0)
            return known_failures[i].why;
    return NULL;
}

static void show_diff(const char *want, const char *got)
{
    size_t i = 0;
    while (want[i] && want[i] == got[i])
        i++;
    size_t b = i > 60 ? i - 60 : 0;
    fprintf(stderr, "    first difference at byte %zu\n    want: %.120s\n    got:  %.120s\n", i,
            want + b, got + b);
}

TEST(corpus)
{
    size_t len;
    char *text = slurp(CORPUS "/cases.json", &len);
    if (!text) {
        printf("corpus: %s/cases.json not found, skipped\n", CORPUS);
        return;
    }
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    free(text);
    CHECK_MSG(root, "cases.json: %s", je.text);
    if (!root)
        return;
    long long now = json_integer_value(json_object_get(root, "now"));
    json_t *templates = json_object_get(root, "templates"),
           *convs = json_object_get(root, "conversations");
    json_t *cases = json_object_get(root, "cases");
    const char *only = getenv("TEMPLATE_ONLY");
    int exact_templates = 0, n_templates = 0;
    printf("%-48s %7s  %s\n", "template", "exact", "note");
    const char *name;
    json_t *info;
    json_object_foreach(templates, name, info)
    {
        if (only && strcmp(only, name) != 0)
            continue;
        n_templates++;
        char path[1024];
        snprintf(path, sizeof(path), CORPUS "/templates/%s.jinja", name);
        char *src = slurp(path, &len);
        CHECK_MSG(src, "%s: cannot read", path);
        if (!src)
            continue;
        struct chat_template *ct = NULL;
        int prc =
            chat_template_parse(src, len, json_string_value(json_object_get(info, "bos_token")),
                                json_string_value(json_object_get(info, "eos_token")), &ct);
        char parse_err[512] = "";
        if (prc < 0)
            snprintf(parse_err, sizeof(parse_err), "%s", err_msg());
        free(src);
        const char *why = known_failure(name);
        int total = 0, exact = 0;
        char first_bad[600] = "";
        size_t i;
        json_t *c;
        json_array_foreach(cases, i, c)
        {
            if (strcmp(json_string_value(json_object_get(c, "template")), name) != 0)
                continue;
            total++;
            const char *conv = json_string_value(json_object_get(c, "conversation"));
            json_t *msgs = NULL, *cv;
            size_t k;
            json_array_foreach(
                convs, k, cv) if (strcmp(json_string_value(json_object_get(cv, "name")), conv) == 0)
                msgs = json_object_get(cv, "messages");
            json_t *want_text = json_object_get(c, "text");
            const char *want_err = json_string_value(json_object_get(c, "error"));
            const char *kind = json_string_value(json_object_get(c, "error_kind"));
            bool ok;
            char *out = NULL;
            int rc = prc;
            if (prc == 0) {
                struct chat_render_opts o = {.add_generation_prompt = json_is_true(
                                                 json_object_get(c, "add_generation_prompt")),
                                             .now = now};
                rc = chat_template_render(ct, msgs, &o, &out, NULL);
            }
            if (want_text)
                ok = rc == 0 && strcmp(out, json_string_value(want_text)) == 0;
            else if (kind && strcmp(kind, "raise_exception") == 0)
                ok = rc == CHAT_RAISED && strcmp(err_msg(), want_err) == 0;
            else
                ok = rc < 0 && rc != CHAT_RAISED;
            if (ok) {
                exact++;
            } else if (!first_bad[0]) {
                snprintf(first_bad, sizeof(first_bad), "%s/%s: %s", conv,
                         json_is_true(json_object_get(c, "add_generation_prompt")) ? "agp"
                                                                                   : "no-agp",
                         rc          ? err_msg()
                         : want_text ? "text differs"
                                     : "rendered, want an error");
                if (!why) {
                    fprintf(stderr, "%s %s: want %s%s\n", name, first_bad,
                            want_text ? "text" : "error ", want_text ? "" : want_err);
                    if (want_text && rc == 0)
                        show_diff(json_string_value(want_text), out);
                }
            }
            free(out);
        }
        chat_template_free(ct);
        exact_templates += exact == total;
        printf("%-48s %3d/%-3d  %s%s%s\n", name, exact, total,
               exact == total ? ""
               : why          ? why
                              : "UNEXPECTED: ",
               exact == total || why ? "" : first_bad, parse_err[0] ? "" : "");
        if (!why)
            CHECK_MSG(exact == total, "%s: %d of %d cases differ", name, total - exact, total);
    }
    printf("corpus: %d of %d templates render every case exactly\n", exact_templates, n_templates);
    json_decref(root);
}

static void setup(void)
{
    setenv("TZ", "UTC", 1); /* cases.json's strftime_now is in UTC */
    tzset();
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
