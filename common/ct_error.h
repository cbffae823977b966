/*
 * ct_error.h - the project's error codes and the caller-owned error message buffer.
 *
 * Every fallible function in ctrun returns an int: 0 on success, a negative number on failure.
 * A failure is either a negated errno (-ENOENT, -ETIMEDOUT, ...) or one of the project codes
 * below, which live in a reserved range far from errno values. One X-macro list generates the
 * enum, ct_strerror() and ct_err_name(), so a new code is added in exactly one place.
 *
 * The numeric code says what kind of failure happened; the human-readable detail (which file,
 * which variable, which byte) goes into a ct_errbuf_t that the caller owns, in the manner of
 * redis' anet.h. Functions never print their own errors: they fill the buffer and the caller
 * decides whether to log it, wrap it or exit.
 */
#ifndef CT_ERROR_H
#define CT_ERROR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Project error codes: XX(NAME, value, message). Values are negative and below -1000, so they
 * never collide with a negated errno. */
#define CT_ERRNO_MAP(XX)                                                                          \
    XX(CT_EPARSE, -1001, "malformed input")                                                       \
    XX(CT_ERANGE_VALUE, -1002, "value out of range")                                              \
    XX(CT_ELIMIT, -1003, "size limit exceeded")                                                   \
    XX(CT_EFORMAT, -1004, "bad file format")                                                      \
    XX(CT_ECRC, -1005, "checksum mismatch")                                                       \
    XX(CT_EPROTOCOL, -1006, "protocol violation")                                                 \
    XX(CT_EPEER, -1007, "peer failed or disconnected")                                            \
    XX(CT_EAUTH, -1008, "authentication failed")                                                  \
    XX(CT_ESTATE, -1009, "operation not valid in this state")                                     \
    XX(CT_ESPAWN, -1010, "could not start process")                                               \
    XX(CT_EMISMATCH, -1011, "data does not match what was expected")                              \
    XX(CT_ECUDA, -1100, "CUDA error")                                                             \
    XX(CT_ECUBLAS, -1101, "cuBLAS error")                                                         \
    XX(CT_ENCCL, -1102, "NCCL error")                                                             \
    XX(CT_ENOGPU, -1103, "no GPU visible")                                                        \
    XX(CT_ENOTBUILT, -1104, "feature not compiled into this build")

enum ct_errno {
#define CT__ERR_ENUM(name, value, msg) name = (value),
    CT_ERRNO_MAP(CT__ERR_ENUM)
#undef CT__ERR_ENUM
};

/* A short description of code: a project code's message, or strerror's text for a negated
 * errno. Never NULL; the string is static and thread-safe. */
const char *ct_strerror(int code);

/* The symbolic name of code ("CT_EPARSE", "ETIMEDOUT"), or "UNKNOWN". */
const char *ct_err_name(int code);

/* Detail of the last failure, written by the callee into storage the caller owns. */
#define CT_ERRBUF_SIZE 512
typedef struct ct_errbuf {
    char msg[CT_ERRBUF_SIZE];
} ct_errbuf_t;

/* Formats the detail into eb (when eb is not NULL) and returns code, so a failing function
 * can `return ct_errbuf_set(eb, CT_EPARSE, "...", ...);`. */
int ct_errbuf_set(ct_errbuf_t *eb, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " (printf-formatted) to the message already in eb, adding context as an
 * error travels up ("RANK: " + "not an integer"). Returns code. */
int ct_errbuf_wrap(ct_errbuf_t *eb, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Empties eb (when not NULL). */
void ct_errbuf_clear(ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CT_ERROR_H */
