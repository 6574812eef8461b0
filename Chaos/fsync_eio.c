// fsync_eio.so: an LD_PRELOAD shim for the chaos campaign's "fsync-eio" fault (reliability-matrix
// D5): while the file named by $CHAOS_FSYNC_EIO exists, fsync(2) and fdatasync(2) fail with EIO
// without syncing — the kernel's answer when a disk write-back failed. The nemesis creates the
// file for a few seconds while work arrives and removes it; bgd must refuse what it could not make
// durable (503), never trust data whose sync failed, and carry on once syncs succeed again.
//
//   cc -shared -fPIC -O2 -o fsync_eio.so Chaos/fsync_eio.c -ldl
//   LD_PRELOAD=$PWD/fsync_eio.so CHAOS_FSYNC_EIO=/tmp/trigger bgd …
//
// With CHAOS_FSYNC_EIO_ONLY=directories, only the fsyncs of directories fail — the sync that
// makes a rename durable — so a test can fail that one step and no other
// (TransferDiskErrorTests).
//
// No constructor and no setenv: Swift's runtime finds argv from `environ`, which must not move.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int armed_for(int fd) {
    const char *trigger = getenv("CHAOS_FSYNC_EIO");
    if (trigger == NULL || access(trigger, F_OK) != 0) return 0;
    const char *only = getenv("CHAOS_FSYNC_EIO_ONLY");
    if (only == NULL || strcmp(only, "directories") != 0) return 1;
    struct stat status;
    return fstat(fd, &status) == 0 && S_ISDIR(status.st_mode);
}

static atomic_ulong failed;

static int fail(void) {
    atomic_fetch_add(&failed, 1);
    errno = EIO;
    return -1;
}

int fsync(int fd) {
    static int (*real)(int);
    if (armed_for(fd)) return fail();
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (armed_for(fd)) return fail();
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}
