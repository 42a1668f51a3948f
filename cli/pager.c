/* pager.c — long output through a pager on a terminal (see pager.h): stdout becomes a pipe into
 * it, so the verbs write as they always do. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pager.h"

static pid_t pager_pid;

/* The command to run, or NULL for none. */
static const char *pager_command(void) {
        const char *p = getenv("SYSTEMD_PAGER");

        if (!p)
                p = getenv("PAGER");
        if (p && (!*p || strcmp(p, "cat") == 0))
                return NULL;
        return p;
}

static void exec_pager(const char *cmd) {
        if (cmd)
                execl("/bin/sh", "sh", "-c", cmd, (char *) NULL);
        else {
                execlp("less", "less", (char *) NULL);
                execlp("more", "more", (char *) NULL);
        }
}

void pager_open(bool enabled, bool utf8) {
        const char *cmd, *term = getenv("TERM");
        int fd[2], ready[2];
        char c;
        pid_t pid;

        /* as systemd's: not into a pipe, and not on a dumb terminal (an editor's shell) */
        if (!enabled || pager_pid > 0 || !isatty(STDOUT_FILENO) || (term && strcmp(term, "dumb") == 0))
                return;
        cmd = pager_command();
        if (!cmd && (getenv("SYSTEMD_PAGER") || getenv("PAGER")))
                return;
        if (pipe2(fd, O_CLOEXEC) < 0)
                return;
        /* The child tells whether the pager started: exec closes `ready` (CLOEXEC) with nothing
         * written; a failed exec writes one byte, and the output goes to the terminal instead. */
        if (pipe2(ready, O_CLOEXEC) < 0) {
                close(fd[0]);
                close(fd[1]);
                return;
        }
        fflush(stdout);
        pid = fork();
        if (pid < 0) {
                close(fd[0]);
                close(fd[1]);
                close(ready[0]);
                close(ready[1]);
                return;
        }
        if (pid == 0) {
                close(ready[0]);
                if (dup2(fd[0], STDIN_FILENO) < 0)
                        _exit(EXIT_FAILURE);
                setenv("LESS", "FRXMK", 0);
                if (utf8)
                        setenv("LESSCHARSET", "utf-8", 0);
                signal(SIGPIPE, SIG_DFL);
                exec_pager(cmd);
                (void) !write(ready[1], "x", 1);
                _exit(EXIT_FAILURE);
        }
        close(fd[0]);
        close(ready[1]);
        if (read(ready[0], &c, 1) == 1) {
                close(ready[0]);
                close(fd[1]);
                (void) waitpid(pid, NULL, 0);
                return;
        }
        close(ready[0]);
        if (dup2(fd[1], STDOUT_FILENO) < 0) {
                close(fd[1]);
                (void) waitpid(pid, NULL, 0);
                return;
        }
        close(fd[1]);
        /* the reader may quit before the end (q in less): the rest is not an error worth a signal */
        signal(SIGPIPE, SIG_IGN);
        pager_pid = pid;
}

void pager_close(void) {
        if (pager_pid <= 0)
                return;
        fflush(stdout);
        fclose(stdout);
        while (waitpid(pager_pid, NULL, 0) < 0 && errno == EINTR)
                ;
        pager_pid = 0;
}
