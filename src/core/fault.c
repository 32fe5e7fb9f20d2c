/* SIGBUS scoped to one guarded call on one thread (see fault.h).
 *
 * The handler is process-wide (signal actions are), the decision is per
 * thread: a thread-local jump buffer armed only while fault_guard runs fn.
 * SIGBUS from a bad mapped access is synchronous, delivered to the thread
 * that touched the page, so the handler runs on the guarded thread itself
 * and siglongjmp back into fault_guard is a jump within that thread's stack.
 * An unarmed fault puts the previous action back and returns: the faulting
 * instruction runs again and faults under that action (the default one
 * ends the process with "Bus error", as before). */
#include "core/fault.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>

#include "core/error.h"

static _Thread_local sigjmp_buf *volatile fault_armed;
static struct sigaction fault_prev;
static pthread_once_t fault_once = PTHREAD_ONCE_INIT;

static void fault_handler(int sig, siginfo_t *info, void *uctx)
{
    (void)info;
    (void)uctx;
    sigjmp_buf *jb = fault_armed;
    if (jb) {
        fault_armed = NULL;
        siglongjmp(*jb, 1);
    }
    sigaction(sig, &fault_prev, NULL);
}

static void fault_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = fault_handler;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &fault_prev);
}

int fault_guard(int (*fn)(void *arg), void *arg, const char *what)
{
    pthread_once(&fault_once, fault_install);
    sigjmp_buf jb;
    /* savemask 1: the jump out of the handler unblocks SIGBUS again */
    if (sigsetjmp(jb, 1) != 0)
        return err_set(ERR_IO,
                       "%s: a bus error (SIGBUS) reading mapped memory: the file "
                       "shrank while mapped",
                       what);
    fault_armed = &jb;
    int rc = fn(arg);
    fault_armed = NULL;
    return rc;
}
