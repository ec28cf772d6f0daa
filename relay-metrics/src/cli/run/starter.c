/*
 * The command's starter for `relay-metrics run` (see start.rs): a small program, freshly
 * executed, that forks the command's process and exits. That process stops itself, so that
 * `run` attaches before the command creates anything, then execs the command.
 *
 * Why a program of its own: `execve` folds the exiting image's peak RSS into the process's
 * `ru_maxrss`, and a fork's memory starts as a copy of its parent's. A process forked by this
 * small program starts with little resident (0.25 MiB here, built with `-z now`: see build.rs;
 * /bin/true alone peaks at 1.0 MiB), so the command's `ru_maxrss` is its own.
 *
 * Nothing else changes: the signal dispositions and mask, stdin and the process group are the
 * ones `run` gave this program (the group is this program's, which `run` created).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs("usage: relay-metrics-start PROGRAM [ARGUMENT...]\n", stderr);
        return 2;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("relay-metrics run: cannot fork");
        return 1;
    }
    if (pid > 0) {
        return 0;
    }
    /* Until the exec, a snapshot names this process: give it the command's name. */
    const char *slash = strrchr(argv[1], '/');
    prctl(PR_SET_NAME, slash ? slash + 1 : argv[1], 0, 0, 0);
    kill(getpid(), SIGSTOP);
    execvp(argv[1], argv + 1);
    /* As a shell would say it: 127 when there is no such program, 126 when it cannot run. */
    int error = errno;
    fprintf(stderr, "relay-metrics run: %s: %s\n", argv[1], strerror(error));
    _exit(error == ENOENT ? 127 : 126);
}
