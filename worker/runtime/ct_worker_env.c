/*
 * ct_worker_env.c - reads the torchrun worker environment into ct_worker_env_t and checks that
 * the values agree with each other. Single-variable syntax and ranges come from common/ct_env;
 * this file adds the cross-variable rules (RANK < WORLD_SIZE, all-or-none sets, ...) and the
 * single-process fallback. It connects to nothing: the store comes later, in ct_worker_init.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

#include "ct_addr.h"
#include "ct_env.h"
#include "ctworker.h"

_Static_assert(CT_WORKER_HOST_MAX == CT_HOST_MAX, "master_addr must hold any valid host");

static const char *const ct_worker_env__rank_vars[4] = {"RANK", "WORLD_SIZE", "LOCAL_RANK",
                                             "LOCAL_WORLD_SIZE"};

/* RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE: all four or none. */
static int ct_worker_env__read_ranks(ct_worker_env_t *env, ct_errbuf_t *eb)
{
    int present = -1, missing = -1;
    for (int i = 0; i < 4; i++) {
        if (ct_env_is_set(ct_worker_env__rank_vars[i]))
            present = present < 0 ? i : present;
        else
            missing = missing < 0 ? i : missing;
    }
    if (present < 0)
        return 0; /* none: a single process */
    if (missing >= 0)
        return ct_errbuf_set(eb, CT_ESTATE,
                             "environment variable %s is not set but %s is (RANK, WORLD_SIZE, "
                             "LOCAL_RANK and LOCAL_WORLD_SIZE go together, as torchrun sets them)",
                             ct_worker_env__rank_vars[missing], ct_worker_env__rank_vars[present]);

    int rc;
    const int max = CT_WORKER_MAX_WORLD;
    if ((rc = ct_env_int("WORLD_SIZE", 1, max, 1, &env->world_size, NULL, eb)) != 0 ||
        (rc = ct_env_int("RANK", 0, max - 1, 0, &env->rank, NULL, eb)) != 0 ||
        (rc = ct_env_int("LOCAL_WORLD_SIZE", 1, max, 1, &env->local_world_size, NULL, eb)) != 0 ||
        (rc = ct_env_int("LOCAL_RANK", 0, max - 1, 0, &env->local_rank, NULL, eb)) != 0)
        return rc;
    if (env->rank >= env->world_size)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "environment variable RANK=%d is not below WORLD_SIZE=%d", env->rank,
                             env->world_size);
    if (env->local_rank >= env->local_world_size)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "environment variable LOCAL_RANK=%d is not below LOCAL_WORLD_SIZE=%d",
                             env->local_rank, env->local_world_size);
    if (env->local_world_size > env->world_size)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "environment variable LOCAL_WORLD_SIZE=%d exceeds WORLD_SIZE=%d",
                             env->local_world_size, env->world_size);
    if (env->local_rank > env->rank)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "environment variable LOCAL_RANK=%d exceeds RANK=%d (a worker's "
                             "global rank is its node's base rank plus its local rank)",
                             env->local_rank, env->rank);
    env->launched = true;
    return 0;
}

/* MASTER_ADDR and MASTER_PORT: both or neither; required for more than one process. */
static int ct_worker_env__read_master(ct_worker_env_t *env, ct_errbuf_t *eb)
{
    const char *addr = ct_env_str("MASTER_ADDR");
    const char *port = ct_env_str("MASTER_PORT");
    if (addr == NULL && port == NULL) {
        if (env->world_size > 1)
            return ct_errbuf_set(eb, CT_ESTATE,
                                 "environment variable MASTER_ADDR is not set (needed to reach the "
                                 "store with WORLD_SIZE=%d)",
                                 env->world_size);
        return 0;
    }
    if (addr == NULL || port == NULL)
        return ct_errbuf_set(eb, CT_ESTATE,
                             "environment variable %s is not set but %s is (they go together)",
                             addr == NULL ? "MASTER_ADDR" : "MASTER_PORT",
                             addr == NULL ? "MASTER_PORT" : "MASTER_ADDR");

    /* An IPv6 address may come bracketed ("[::1]"); the struct holds it bare. */
    char host[CT_HOST_MAX + 2];
    size_t len = strlen(addr);
    if (len >= 2 && addr[0] == '[' && addr[len - 1] == ']') {
        addr++;
        len -= 2;
    }
    if (len >= CT_HOST_MAX)
        return ct_errbuf_set(eb, CT_EPARSE,
                             "environment variable MASTER_ADDR: %zu characters long (at most %d)",
                             len, CT_HOST_MAX - 1);
    memcpy(host, addr, len);
    host[len] = '\0';
    ct_host_kind_t kind;
    int rc = ct_host_validate(host, &kind, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "environment variable MASTER_ADDR");
    rc = ct_port_parse(port, false, &env->master_port, eb);
    if (rc != 0)
        return ct_errbuf_wrap(eb, rc, "environment variable MASTER_PORT");
    memcpy(env->master_addr, host, len + 1);
    env->has_master = true;
    return 0;
}

static int ct_worker_env__read_elastic(ct_worker_env_t *env, ct_errbuf_t *eb)
{
    bool have_count, have_max;
    int rc;
    if ((rc = ct_env_int("TORCHELASTIC_RESTART_COUNT", 0, INT_MAX, 0, &env->restart_count,
                         &have_count, eb)) != 0 ||
        (rc = ct_env_int("TORCHELASTIC_MAX_RESTARTS", 0, INT_MAX, 0, &env->max_restarts,
                         &have_max, eb)) != 0)
        return rc;
    if (have_count && have_max && env->restart_count > env->max_restarts)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "environment variable TORCHELASTIC_RESTART_COUNT=%d exceeds "
                             "TORCHELASTIC_MAX_RESTARTS=%d",
                             env->restart_count, env->max_restarts);
    if ((rc = ct_env_bool("TORCHELASTIC_USE_AGENT_STORE", false, &env->use_agent_store, NULL,
                          eb)) != 0)
        return rc;

    const char *run_id = ct_env_str("TORCHELASTIC_RUN_ID");
    if (run_id != NULL) {
        size_t len = strlen(run_id);
        if (len == 0)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "environment variable TORCHELASTIC_RUN_ID is empty");
        if (len >= sizeof env->run_id)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "environment variable TORCHELASTIC_RUN_ID: %zu characters long "
                                 "(at most %zu)",
                                 len, sizeof env->run_id - 1);
        for (size_t i = 0; i < len; i++) {
            unsigned char c = (unsigned char)run_id[i];
            if (c < 0x20 || c == 0x7F)
                return ct_errbuf_set(eb, CT_EPARSE,
                                     "environment variable TORCHELASTIC_RUN_ID: control character "
                                     "0x%02x at position %zu",
                                     c, i);
        }
        memcpy(env->run_id, run_id, len + 1);
    }

    const char *error_file = ct_env_str("TORCHELASTIC_ERROR_FILE");
    if (error_file != NULL) {
        size_t len = strlen(error_file);
        if (len >= sizeof env->error_file)
            return ct_errbuf_set(eb, CT_EPARSE,
                                 "environment variable TORCHELASTIC_ERROR_FILE: %zu characters "
                                 "long (at most %zu)",
                                 len, sizeof env->error_file - 1);
        memcpy(env->error_file, error_file, len + 1); /* "" means no file, as in torchrun */
    }
    return 0;
}

/* CTRUN_HEARTBEAT_FD must name an inherited pipe (or socket) open for writing. */
static int ct_worker_env__read_heartbeat(ct_worker_env_t *env, ct_errbuf_t *eb)
{
    bool found;
    int fd;
    int rc = ct_env_int("CTRUN_HEARTBEAT_FD", 0, INT_MAX, -1, &fd, &found, eb);
    if (rc != 0 || !found)
        return rc;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return ct_errbuf_set(eb, CT_ESTATE,
                             "environment variable CTRUN_HEARTBEAT_FD=%d: fd %d is not open", fd,
                             fd);
    if ((fl & O_ACCMODE) == O_RDONLY)
        return ct_errbuf_set(eb, CT_ESTATE,
                             "environment variable CTRUN_HEARTBEAT_FD=%d: fd %d is not open for "
                             "writing",
                             fd, fd);
    struct stat st;
    if (fstat(fd, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
        return ct_errbuf_set(eb, CT_ESTATE,
                             "environment variable CTRUN_HEARTBEAT_FD=%d: fd %d is not a pipe", fd,
                             fd);
    env->heartbeat_fd = fd;
    return 0;
}

int ct_worker_env_read(ct_worker_env_t *env, ct_errbuf_t *eb)
{
    memset(env, 0, sizeof *env);
    env->world_size = 1;
    env->local_world_size = 1;
    env->heartbeat_fd = -1;
    strcpy(env->run_id, "none");

    int rc;
    if ((rc = ct_worker_env__read_ranks(env, eb)) != 0)
        return rc;
    bool found;
    if ((rc = ct_env_int("GROUP_RANK", 0, CT_WORKER_MAX_WORLD - 1, 0, &env->group_rank, &found,
                         eb)) != 0)
        return rc;
    if (found && env->group_rank >= env->world_size)
        return ct_errbuf_set(eb, CT_ERANGE_VALUE,
                             "environment variable GROUP_RANK=%d is not below WORLD_SIZE=%d",
                             env->group_rank, env->world_size);
    if ((rc = ct_worker_env__read_master(env, eb)) != 0 ||
        (rc = ct_worker_env__read_elastic(env, eb)) != 0 ||
        (rc = ct_worker_env__read_heartbeat(env, eb)) != 0)
        return rc;
    return 0;
}
