/*
 * ctrun_signal.h - signal numbers and their names, as the launcher prints and reads them.
 *
 * The failure report names a signal the way Python's signal.Signals does ("SIGSEGV"), and
 * --signals_to_handle takes a comma list of such names. This module only translates; it
 * installs no handlers (the agent does that on its libuv loop).
 */
#ifndef CTRUN_SIGNAL_H
#define CTRUN_SIGNAL_H

#include <stddef.h>

#include "ct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most signals --signals_to_handle can name. */
#define CTRUN_SIGNALS_MAX 32

/* Writes the name of sig into buf ("SIGSEGV", "SIGRTMIN+3"; "SIG99" for a number no name
 * exists for) and returns buf. */
const char *ctrun_signal_name(int sig, char *buf, size_t size);

/* Parses one signal name: "SIGTERM" or "TERM" in any case, or a decimal number. Errors:
 * CT_EPARSE for a name that is no signal. */
int ctrun_signal_from_name(const char *name, int *sig, ct_errbuf_t *eb);

/* Parses torchrun's --signals_to_handle value: a comma list of names, blanks around names
 * allowed, duplicates dropped. Signals that cannot be caught or that the agent needs for
 * itself (SIGKILL, SIGSTOP, SIGCHLD) are refused. Errors: CT_EPARSE, CT_ELIMIT. */
int ctrun_signal_list_parse(const char *text, int *sigs, size_t max, size_t *count,
                            ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CTRUN_SIGNAL_H */
