// bgd-confine: confines a process bgd launches to what an app may touch, then becomes it.
//
//   bgd-confine [--cgroup PROCS]... [--read PATH]... [--write PATH]... -- PROGRAM [ARG]...
//   bgd-confine --probe        (exit status: the kernel's Landlock ABI version, 0 for none)
//
// `--cgroup` first moves the process into a cgroup (PROCS is its cgroup.procs file), before the
// app runs a single instruction: nothing it forks can start outside the app's cgroup. (bgd
// spawns with posix_spawn, which cannot spawn into a cgroup; this is the "move the child before
// exec" way.) Without `--read`/`--write` no Landlock domain is entered.
//
// With Linux's Landlock (5.13+), every file-system access outside the rules is refused:
// `--read` grants reading and executing beneath PATH, `--write` everything beneath PATH. bgd
// computes the rules (readable: everything but its own state and the operator token; writable:
// the app's container and /dev) and passes them here because Landlock can only be entered by the
// process itself, between fork and exec, which posix_spawn cannot do. Where the kernel has no
// Landlock the program runs unconfined and one line on stderr says so (bgd reports the mode).
// Plain C and raw syscalls: it runs before every app launch and must cost nothing.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

// From linux/landlock.h, spelled out so the build needs no kernel headers.
struct ruleset_attr { uint64_t handled_access_fs; uint64_t handled_access_net; uint64_t scoped; };
struct path_beneath_attr { uint64_t allowed_access; int32_t parent_fd; } __attribute__((packed));
enum { RULE_PATH_BENEATH = 1, CREATE_RULESET_VERSION = 1 };
#define FS_EXECUTE (1ULL << 0)
#define FS_WRITE_FILE (1ULL << 1)
#define FS_READ_FILE (1ULL << 2)
#define FS_READ_DIR (1ULL << 3)
#define FS_REFER (1ULL << 13)
#define FS_TRUNCATE (1ULL << 14)
#define FS_IOCTL_DEV (1ULL << 15)

static long landlock_create_ruleset(const struct ruleset_attr *attr, size_t size, uint32_t flags) {
    return syscall(444, attr, size, flags);
}
static long landlock_add_rule(int ruleset, int type, const void *attr, uint32_t flags) {
    return syscall(445, ruleset, type, attr, flags);
}
static long landlock_restrict_self(int ruleset, uint32_t flags) { return syscall(446, ruleset, flags); }

/// Every file-system right the kernel's Landlock version knows (newer rights left out on older kernels).
static uint64_t all_rights(long abi) {
    uint64_t rights = (1ULL << 13) - 1;  // ABI 1: execute … make_sym
    if (abi >= 2) rights |= FS_REFER;
    if (abi >= 3) rights |= FS_TRUNCATE;
    if (abi >= 5) rights |= FS_IOCTL_DEV;
    return rights;
}

static int add(int ruleset, const char *path, uint64_t rights) {
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT || errno == EACCES ? 0 : -1;  // gone meanwhile: nothing to grant
    // A rule on a file (not a directory) may hold only the rights that apply to files.
    struct path_beneath_attr attr = {.allowed_access = rights, .parent_fd = fd};
    long result = landlock_add_rule(ruleset, RULE_PATH_BENEATH, &attr, 0);
    if (result != 0 && errno == EINVAL) {
        attr.allowed_access = rights & (FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV);
        result = landlock_add_rule(ruleset, RULE_PATH_BENEATH, &attr, 0);
    }
    close(fd);
    return result == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    // `--probe`: the exit status is the kernel's Landlock ABI version (0: none), for bgd to say
    // once at start which mode it runs in.
    if (argc == 2 && strcmp(argv[1], "--probe") == 0) {
        long abi = landlock_create_ruleset(NULL, 0, CREATE_RULESET_VERSION);
        return abi > 0 ? (int)abi : 0;
    }
    int program = 1;
    while (program < argc && strcmp(argv[program], "--") != 0) program += 2;
    if (program >= argc - 1) {
        fprintf(stderr, "usage: bgd-confine [--cgroup PROCS]... [--read PATH]... [--write PATH]... -- PROGRAM [ARG]...\n");
        return 64;
    }
    int rules = 0;
    for (int i = 1; i < program; i += 2) {
        if (strcmp(argv[i], "--cgroup") != 0) {
            rules++;
            continue;
        }
        int fd = open(argv[i + 1], O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "0", 1) != 1) {
            fprintf(stderr, "bgd-confine: cannot enter the cgroup of %s: %s\n", argv[i + 1], strerror(errno));
            return 71;
        }
        close(fd);
    }
    long abi = rules == 0 ? 1 : landlock_create_ruleset(NULL, 0, CREATE_RULESET_VERSION);
    if (rules == 0) {
        // Only the cgroup was asked for.
    } else if (abi < 1) {
        fprintf(stderr, "bgd-confine: this kernel has no Landlock (%s); %s runs unconfined\n", strerror(errno), argv[program + 1]);
    } else {
        uint64_t rights = all_rights(abi);
        struct ruleset_attr attr = {.handled_access_fs = rights};
        int ruleset = (int)landlock_create_ruleset(&attr, sizeof(uint64_t), 0);
        if (ruleset < 0) {
            fprintf(stderr, "bgd-confine: cannot make a Landlock ruleset: %s\n", strerror(errno));
            return 71;
        }
        for (int i = 1; i < program; i += 2) {
            if (strcmp(argv[i], "--cgroup") == 0) continue;
            uint64_t granted = strcmp(argv[i], "--write") == 0 ? rights : (FS_EXECUTE | FS_READ_FILE | FS_READ_DIR);
            if (strcmp(argv[i], "--write") != 0 && strcmp(argv[i], "--read") != 0) {
                fprintf(stderr, "bgd-confine: unknown option %s\n", argv[i]);
                return 64;
            }
            if (add(ruleset, argv[i + 1], granted) != 0) {
                fprintf(stderr, "bgd-confine: cannot grant %s: %s\n", argv[i + 1], strerror(errno));
                return 71;
            }
        }
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || landlock_restrict_self(ruleset, 0) != 0) {
            fprintf(stderr, "bgd-confine: cannot enter the Landlock domain: %s\n", strerror(errno));
            return 71;
        }
        close(ruleset);
    }
    execvp(argv[program + 1], argv + program + 1);
    fprintf(stderr, "bgd-confine: cannot start %s: %s\n", argv[program + 1], strerror(errno));
    return 127;
}
