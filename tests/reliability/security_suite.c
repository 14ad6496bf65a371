/* security_suite.c - the misuse suite's matrix: every probe of misuse.c
 * (each misuse kind at each of its block sizes, and each write with each
 * follow-up: 1361 probes) on glibc and at guard levels 0-3, with
 * guard.on_error = abort and = report, each in a fresh process
 * (docs/security.md, "The misuse suite").
 *
 * The probe program is linked with libc only; sefer comes in with
 * LD_PRELOAD (MISUSE_PATH and SEFER_SO_PATH are given by meson), glibc's
 * column is the same program without it.  Address-space randomisation is
 * off in the probes (personality), so what a 1 MiB overflow runs into is
 * the same from run to run and the table can be checked.
 *
 * How a probe ends:
 *   detected           sefer reported it (a guard report on stderr) and
 *                      aborted, or refused it and went on (report mode)
 *   aborted            the process aborted without a sefer report (glibc's
 *                      own checks: "free(): invalid pointer", ...)
 *   faulted            the probe's own access faulted (a guard page, an
 *                      inaccessible freed block or malloc(0))
 *   held / broken      a property probe's verdict
 *   refused (counted)  level 0: a bad free counted and refused silently
 *   missed             nothing noticed; sefer_check finds sefer intact
 *   missed, heap corrupted   nothing noticed; sefer_check finds damage
 *   crash (SIGxxx)     killed elsewhere than in the probe's own access
 * "detected", "aborted", "faulted" and "held" are passes.  The table says
 * "detected" for all three kinds of detection: at level 3, where a block
 * lies is random, and whether an underflow runs into a guard page (faulted)
 * or into the block before (detected on free) changes from run to run. */
#include "rel.h"
#include "security_suite.h"

#include <sys/personality.h>
#include <sys/resource.h>

#define MAX_PROBES 1600
#define LEVELS 4
/* configuration c: 0 glibc; 1 + 2 * level (abort), 2 + 2 * level (report) */
#define CONFIGS (1 + 2 * LEVELS)
#define GLIBC 0
#define CONF(level, report) (1 + 2 * (level) + ((report) ? 1 : 0))
#define PARALLEL 2

struct sprobe {
    char name[64], group[24], row[64], size[8], what[200];
};
static struct sprobe probes[MAX_PROBES];
static int nprobes;

enum sout { SO_DETECTED, SO_ABORTED, SO_FAULTED, SO_HELD, SO_BROKEN, SO_COUNTED, SO_MISSED, SO_CORRUPT, SO_CRASH, SO_ERROR };

struct sres {
    enum sout out;
    int sig;
    bool sefer_reported;
    char err[240];
};

static bool passes(enum sout o) { return o <= SO_HELD; }

/* ---- the probes -------------------------------------------------------------- */

static void load_probes(void)
{
    if (nprobes > 0)
        return;
    FILE *f = popen(MISUSE_PATH " --list", "r");
    if (f == NULL)
        ck_abort_msg("cannot run %s --list", MISUSE_PATH);
    char line[512];
    while (nprobes < MAX_PROBES && fgets(line, sizeof line, f)) {
        struct sprobe *p = &probes[nprobes];
        line[strcspn(line, "\n")] = '\0';
        char *save = NULL, *f1 = strtok_r(line, "\t", &save), *f2 = strtok_r(NULL, "\t", &save),
             *f3 = strtok_r(NULL, "\t", &save), *f4 = strtok_r(NULL, "\t", &save),
             *f5 = strtok_r(NULL, "\t", &save);
        if (!f1 || !f2 || !f3 || !f4 || !f5)
            continue;
        snprintf(p->name, sizeof p->name, "%s", f1);
        snprintf(p->group, sizeof p->group, "%s", f2);
        snprintf(p->row, sizeof p->row, "%s", f3);
        snprintf(p->size, sizeof p->size, "%s", f4);
        snprintf(p->what, sizeof p->what, "%s", f5);
        nprobes++;
    }
    if (pclose(f) != 0 || nprobes == 0)
        ck_abort_msg("%s --list failed", MISUSE_PATH);
}

/* ---- running one ------------------------------------------------------------- */

struct job {
    pid_t pid;
    int out_fd, err_fd, probe, config;
};

static void start(struct job *j, int probe, int config)
{
    j->probe = probe;
    j->config = config;
    j->out_fd = memfd_create("misuse-out", 0);
    j->err_fd = memfd_create("misuse-err", 0);
    fflush(stdout);
    fflush(stderr);
    j->pid = fork();
    if (j->pid != 0)
        return;
    dup2(j->out_fd, 1);
    dup2(j->err_fd, 2);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    personality(ADDR_NO_RANDOMIZE);
    for (bool again = true; again;) { /* nothing of the caller's changes the probe */
        again = false;
        for (char **e = environ; *e && !again; e++)
            if (strncmp(*e, "SEFER_", 6) == 0) {
                char name[128];
                snprintf(name, sizeof name, "%.*s", (int)strcspn(*e, "="), *e);
                unsetenv(name);
                again = true;
            }
    }
    /* meson sets MALLOC_PERTURB_ (glibc then fills freed memory) */
    unsetenv("MALLOC_PERTURB_");
    unsetenv("MALLOC_CHECK_");
    unsetenv("GLIBC_TUNABLES");
    if (config == GLIBC) {
        /* (test_security --table --ref NAME=LIB: another allocator there) */
        const char *ref = getenv("SECURITY_REF_PRELOAD");
        if (ref != NULL)
            setenv("LD_PRELOAD", ref, 1);
        else
            unsetenv("LD_PRELOAD");
    } else {
        char level[2] = {(char)('0' + (config - 1) / 2), '\0'};
        setenv("LD_PRELOAD", SEFER_SO_PATH, 1);
        setenv("SEFER_GUARD_LEVEL", level, 1);
        setenv("SEFER_GUARD_ON_ERROR", (config - 1) % 2 ? "report" : "abort", 1);
    }
    alarm(30);
    execl(MISUSE_PATH, "misuse", probes[probe].name, (char *)NULL);
    _exit(127);
}

static size_t slurp_fd(int fd, char *buf, size_t len)
{
    size_t got = 0;
    ssize_t n;
    if (lseek(fd, 0, SEEK_SET) != 0)
        return 0;
    while (got + 1 < len && (n = read(fd, buf + got, len - 1 - got)) > 0)
        got += (size_t)n;
    buf[got] = '\0';
    close(fd);
    return got;
}

/* sefer's guard reports (lib/guard_report.c) */
static bool has_guard_report(const char *err)
{
    static const char *const texts[] = {
        "free of a pointer sefer does not own", "free of a pointer inside a block", "double free",
        "write past the end of a block", "write into a freed block", "operator delete that does not match",
        "memcpy/memmove/memset out of a block's bounds",
    };
    for (const char *at = strstr(err, "sefer: "); at; at = strstr(at + 1, "sefer: "))
        for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++)
            if (strncmp(at + 7, texts[k], strlen(texts[k])) == 0)
                return true;
    return false;
}

static void finish(struct job *j, int status, struct sres *r)
{
    char out[1024], err[4096];
    slurp_fd(j->out_fd, out, sizeof out);
    slurp_fd(j->err_fd, err, sizeof err);
    memset(r, 0, sizeof *r);
    snprintf(r->err, sizeof r->err, "%.*s", (int)sizeof r->err - 1, err);
    r->sefer_reported = has_guard_report(err);
    int check = -1;
    unsigned long long counted = 0;
    const char *line = strstr(out, "check=");
    if (line)
        sscanf(line, "check=%d counted=%llu", &check, &counted);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 86 && strstr(out, "fault=access"))
        r->out = SO_FAULTED;
    else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT)
        r->out = r->sefer_reported ? SO_DETECTED : SO_ABORTED;
    else if (WIFSIGNALED(status)) {
        r->out = SO_CRASH;
        r->sig = WTERMSIG(status);
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !strstr(out, "survived"))
        r->out = SO_ERROR;
    else if (strstr(out, "verdict=held"))
        r->out = SO_HELD;
    else if (strstr(out, "verdict=broken"))
        r->out = SO_BROKEN;
    else if (r->sefer_reported)
        r->out = SO_DETECTED;
    else if (check > 0)
        r->out = SO_CORRUPT;
    else
        r->out = counted ? SO_COUNTED : SO_MISSED;
}

/* Runs every probe in the configurations whose bit is in `mask`, PARALLEL
 * at a time; results[probe][config]. */
static void run_matrix(unsigned mask, struct sres (*results)[CONFIGS])
{
    load_probes();
    struct job running[PARALLEL];
    int busy = 0, next = 0, total = nprobes * CONFIGS;
    while (next < total || busy > 0) {
        while (busy < PARALLEL && next < total) {
            int probe = next / CONFIGS, config = next % CONFIGS;
            next++;
            if (mask & (1u << config))
                start(&running[busy++], probe, config);
        }
        if (busy == 0)
            continue;
        int status = 0;
        pid_t pid = wait(&status);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            ck_abort_msg("wait: %s", strerror(errno));
        }
        for (int k = 0; k < busy; k++)
            if (running[k].pid == pid) {
                finish(&running[k], status, &results[running[k].probe][running[k].config]);
                running[k] = running[--busy];
                break;
            }
    }
}

static const char *outcome_text(const struct sres *r, char *buf, size_t len)
{
    static const char *const text[] = {
        [SO_DETECTED] = "detected", [SO_ABORTED] = "aborted", [SO_FAULTED] = "faulted",
        [SO_HELD] = "held", [SO_BROKEN] = "broken", [SO_COUNTED] = "refused (counted)",
        [SO_MISSED] = "missed", [SO_CORRUPT] = "missed, heap corrupted", [SO_ERROR] = "error",
    };
    if (r->out != SO_CRASH)
        return text[r->out];
    snprintf(buf, len, "crash (SIG%s)", sigabbrev_np(r->sig) ? sigabbrev_np(r->sig) : "?");
    return buf;
}

static const char *config_name(int config, char *buf, size_t len)
{
    if (config == GLIBC)
        return "glibc";
    snprintf(buf, len, "level %d, %s", (config - 1) / 2, (config - 1) % 2 ? "report" : "abort");
    return buf;
}

/* ---- the table ------------------------------------------------------------------- */

static struct sres table_results[MAX_PROBES][CONFIGS];

size_t suite_table(char *buf, size_t len)
{
    unsigned mask = 1u << GLIBC;
    for (int level = 0; level < LEVELS; level++)
        mask |= 1u << CONF(level, false);
    run_matrix(mask, table_results);
    size_t at = 0;
    int pass[CONFIGS] = {0};
#define ADD(...) at += (size_t)snprintf(buf + at, at < len ? len - at : 0, __VA_ARGS__)
    const char *ref_name = getenv("SECURITY_REF_NAME");
    ADD("| misuse | what the probe does | sizes | %s | level 0 | level 1 | level 2 | level 3 |\n",
        ref_name != NULL ? ref_name : "glibc");
    ADD("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    /* a row per kind and follow-up: how many of its sizes each column
     * catches (probes of a row are listed together) */
    for (int i = 0; i < nprobes;) {
        int end = i, row_pass[CONFIGS] = {0};
        while (end < nprobes && strcmp(probes[end].row, probes[i].row) == 0)
            end++;
        for (int k = i; k < end; k++)
            for (int c = 0; c < CONFIGS; c++)
                if (mask & (1u << c)) {
                    row_pass[c] += passes(table_results[k][c].out);
                    pass[c] += passes(table_results[k][c].out);
                }
        ADD("| `%s` | %s | %d |", probes[i].row, probes[i].what, end - i);
        for (int c = 0; c < CONFIGS; c++)
            if (mask & (1u << c))
                ADD(" %d |", row_pass[c]);
        ADD("\n");
        i = end;
    }
    ADD("| **caught** | | %d | **%d** | **%d** | **%d** | **%d** | **%d** |\n", nprobes, pass[GLIBC],
        pass[CONF(0, false)], pass[CONF(1, false)], pass[CONF(2, false)], pass[CONF(3, false)]);
    /* the probes behind the gap that matters most: what level 3 misses
     * (glibc's column is left out: it is a reference, not checked) */
    const struct {
        const char *title;
        int worse, better;
    } gaps[] = {
        {"Level 3 misses", CONF(3, false), -1},
    };
    for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
        int count = 0;
        ADD("\n%s:", gaps[g].title);
        for (int i = 0; i < nprobes; i++) {
            const struct sres *r = &table_results[i][gaps[g].worse];
            if (passes(r->out) || (gaps[g].better >= 0 && !passes(table_results[i][gaps[g].better].out)))
                continue;
            char tmp[32];
            ADD("%s `%s` (%s)", count++ ? "," : "", probes[i].name, outcome_text(r, tmp, sizeof tmp));
        }
        ADD("%s\n", count ? "." : " none.");
    }
#undef ADD
    return at < len ? at : len - 1;
}

/* ---- the matrix test ----------------------------------------------------------------- */

static struct sres matrix[MAX_PROBES][CONFIGS];

/* Whatever level N detects, level N + 1 detects too, in both on_error
 * modes; both modes pass the same probes; level 0 never reports; level 2
 * passes every probe glibc passes; level 3 passes every probe. */
START_TEST(test_suite_nested)
{
    run_matrix(~0u, matrix);
    int level3 = 0, problems = 0;
    char a[32], b[32], c1[32], c2[32];
    for (int i = 0; i < nprobes; i++) {
        const char *name = probes[i].name;
        for (int c = 0; c < CONFIGS; c++) {
            const struct sres *r = &matrix[i][c];
            printf("%-34s %-16s %s\n", name, config_name(c, c1, sizeof c1), outcome_text(r, a, sizeof a));
            if (r->out == SO_ERROR) {
                printf("  ERROR: the probe itself failed: %s\n", r->err);
                problems++;
            }
        }
        for (int report = 0; report < 2; report++)
            for (int level = 0; level + 1 < LEVELS; level++) {
                const struct sres *lo = &matrix[i][CONF(level, report)], *hi = &matrix[i][CONF(level + 1, report)];
                if (passes(lo->out) && !passes(hi->out)) {
                    printf("  NOT NESTED: %s passes at %s (%s) but not at %s (%s)\n", name,
                           config_name(CONF(level, report), c1, sizeof c1), outcome_text(lo, a, sizeof a),
                           config_name(CONF(level + 1, report), c2, sizeof c2), outcome_text(hi, b, sizeof b));
                    problems++;
                }
            }
        for (int level = 1; level < LEVELS; level++) {
            const struct sres *ab = &matrix[i][CONF(level, false)], *rep = &matrix[i][CONF(level, true)];
            if (passes(ab->out) != passes(rep->out)) {
                printf("  MODES DIFFER: %s at level %d: abort %s, report %s\n", name, level,
                       outcome_text(ab, a, sizeof a), outcome_text(rep, b, sizeof b));
                problems++;
            }
        }
        for (int report = 0; report < 2; report++)
            if (matrix[i][CONF(0, report)].sefer_reported) {
                printf("  LEVEL 0 REPORTED: %s: %s\n", name, matrix[i][CONF(0, report)].err);
                problems++;
            }
        if (passes(matrix[i][GLIBC].out) && !passes(matrix[i][CONF(2, false)].out)) {
            printf("  BELOW GLIBC: %s: glibc %s, level 2 %s\n", name, outcome_text(&matrix[i][GLIBC], a, sizeof a),
                   outcome_text(&matrix[i][CONF(2, false)], b, sizeof b));
            problems++;
        }
        level3 += passes(matrix[i][CONF(3, false)].out);
    }
    printf("level 3 passes %d of %d\n", level3, nprobes);
    ck_assert_msg(problems == 0, "%d problem(s) in the misuse matrix (see the log)", problems);
    ck_assert_msg(level3 == nprobes, "level 3 passes only %d of %d", level3, nprobes);
}
END_TEST

void suite_add_tests(Suite *s)
{
    TCase *tc = tcase_create("misuse_suite");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_suite_nested);
    suite_add_tcase(s, tc);
}
