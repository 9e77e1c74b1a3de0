/* The CLI's SIGBUS guard. The library reads index sections and .npy inputs through
 * mappings; a file truncated in place under one (by hand, or by another program: Chimera
 * itself only ever replaces index files by rename) turns the next access past the new end
 * into SIGBUS, which would kill the command with a bare "Bus error". The handler names
 * the file instead, using the library's registry of its mappings, and exits with status
 * 1 like any other failed command.
 *
 * Everything in the handler is async-signal-safe: chimera_mapping_describe (a fixed
 * table of lock-free atomics), write(2) and _exit(2). It does not return: returning from
 * a SIGBUS raised by a memory access would retry the access and fault again. A SIGBUS
 * that is not about a library mapping gets the generic message and the same exit. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void put(const char *s) { (void)!write(STDERR_FILENO, s, strlen(s)); }

static void on_sigbus(int sig, siginfo_t *si, void *uctx)
{
    (void)sig;
    (void)uctx;
    char name[256];
    if (si && chimera_mapping_describe(si->si_addr, name, sizeof name) > 0) {
        put("chimera: error: ");
        put(name);
        put(" was truncated or changed while in use\n");
    } else {
        put("chimera: error: bus error: a mapped file was truncated or changed while in use\n");
    }
    _exit(1);
}

void cli_sigbus_guard(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}
