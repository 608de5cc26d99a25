/*
 * store_master.h — starts and stops a tidewire-master process for the Store's C tests. The
 * binary is found next to the library ($TIDEWIRE_LIB's directory) or in target/release. The
 * including file defines _POSIX_C_SOURCE before its first include.
 */
#ifndef TW_C_TESTS_STORE_MASTER_H
#define TW_C_TESTS_STORE_MASTER_H

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t master_pid = -1;

/* Starts tidewire-master on a free port; writes "127.0.0.1:PORT" into addr. */
static int start_master(char *addr, size_t len) {
    char bin[1024];
    const char *lib = getenv("TIDEWIRE_LIB");
    if (lib && strrchr(lib, '/')) {
        size_t dir = (size_t)(strrchr(lib, '/') - lib);
        snprintf(bin, sizeof bin, "%.*s/tidewire-master", (int)dir, lib);
    } else {
        snprintf(bin, sizeof bin, "target/release/tidewire-master");
    }
    int fds[2];
    if (pipe(fds) != 0) return -1;
    master_pid = fork();
    if (master_pid < 0) return -1;
    if (master_pid == 0) {
        dup2(fds[1], 1);
        int quiet = open("/dev/null", O_WRONLY);
        if (quiet >= 0) dup2(quiet, 2);
        close(fds[0]);
        close(fds[1]);
        execl(bin, bin, "--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=0",
              "--metrics_host=127.0.0.1", "--default_kv_lease_ttl=5000", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char line[256];
    ssize_t n = 0;
    while (n < (ssize_t)sizeof line - 1) {
        ssize_t r = read(fds[0], line + n, 1);
        if (r <= 0 || line[n] == '\n') break;
        n += r;
    }
    line[n] = '\0';
    close(fds[0]);
    const char *p = strstr(line, "\"rpc_port\":");
    if (!p) return -1;
    snprintf(addr, len, "127.0.0.1:%d", atoi(p + 11));
    return 0;
}

static void stop_master(void) {
    if (master_pid > 0) {
        kill(master_pid, SIGKILL);
        waitpid(master_pid, NULL, 0);
    }
}

#endif
