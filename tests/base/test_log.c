/*
 * test_log.c — ZINC_LOG (base/log.c): the levels by name, per subsystem, and "off" (nothing, not
 * even errors: a library user who reports zinc_last_error itself asked for a way to silence
 * zinc's stderr); an unknown name leaves the default (info). Each setting runs in a child, since
 * the variable is read once per process; the child's stderr is read back through a pipe.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "testutil.h"

/* What a process with ZINC_LOG=env (NULL: unset) prints for one line of each level in
 * subsystems "a" and "b", after zlog_quiet("q") and a warning and an error of "q". */
static void logged(const char *env, char *out, size_t n)
{
    int fd[2];
    out[0] = 0;
    if (pipe(fd) != 0) return;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        if (env) setenv("ZINC_LOG", env, 1);
        else unsetenv("ZINC_LOG");
        const char *subs[] = {"a", "b"};
        for (int s = 0; s < 2; s++) {
            zlog(ZLOG_ERROR, subs[s], -1, "E");
            zlog(ZLOG_WARN, subs[s], -1, "W");
            zlog(ZLOG_INFO, subs[s], -1, "I");
            zlog(ZLOG_DEBUG, subs[s], -1, "D");
        }
        zlog_quiet("q");
        zlog(ZLOG_WARN, "q", -1, "W");
        zlog(ZLOG_ERROR, "q", -1, "E");
        _exit(0);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < n && (k = read(fd[0], out + got, n - 1 - got)) > 0) got += (size_t)k;
    out[got] = 0;
    close(fd[0]);
    waitpid(pid, NULL, 0);
}

/* The lines as "subsystem:letter" joined by spaces ("a:E a:W ..."). */
static void expect(const char *env, const char *want)
{
    char raw[4096], got[1024] = "";
    logged(env, raw, sizeof raw);
    for (char *line = strtok(raw, "\n"); line; line = strtok(NULL, "\n")) {
        char sub[16];
        const char *end = strrchr(line, ' ');
        if (sscanf(line, "[zinc %15[^]]]", sub) != 1 || !end) continue;
        size_t k = strlen(got);
        snprintf(got + k, sizeof got - k, "%s%s:%s", k ? " " : "", sub, end + 1);
    }
    ZT_CHECK(!strcmp(got, want), "ZINC_LOG=%s: printed '%s', want '%s'", env ? env : "(unset)",
             got, want);
}

int main(void)
{
    expect(NULL, "a:E a:W a:I b:E b:W b:I q:E");
    expect("debug", "a:E a:W a:I a:D b:E b:W b:I b:D q:E");
    expect("warn,b=error", "a:E a:W b:E q:E");
    expect("off", "");
    expect("info,a=off", "b:E b:W b:I q:E");
    expect("off,b=warn", "b:E b:W");
    expect("loud", "a:E a:W a:I b:E b:W b:I q:E");
    return zt_finish("test_log");
}
