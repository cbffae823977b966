/*
 * ct_proc.c - reads a process's state from /proc/<pid>/stat. The command name in parentheses
 * may itself hold spaces and ')', so the state is found after the last ')'.
 */
#include "ct_proc.h"

#include <stdio.h>
#include <string.h>

char ct_proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    return rp != NULL && rp[1] == ' ' ? rp[2] : 0;
}

bool ct_proc_alive(pid_t pid)
{
    char s = ct_proc_state(pid);
    return s != 0 && s != 'Z' && s != 'X';
}
