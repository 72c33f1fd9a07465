/* A JIT in the place of a file: maps libm's code, unmaps it, maps anonymous memory at the
 * same address and writes code there that calls poll() with one fd = -1 entry (the rare
 * arm of poll.fd_negative), CALLS times. Its stacks' caller is that anonymous code: a
 * tracer that kept the mappings of before names it after libm. */
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int (*poll_fn)(struct pollfd *, nfds_t, int);

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 10;
    int fd = open("/lib/x86_64-linux-gnu/libm.so.6", O_RDONLY);
    if (fd < 0) { perror("open libm"); return 1; }
    size_t size = 1 << 16;
    void *at = mmap(NULL, size, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    if (at == MAP_FAILED) { perror("mmap libm"); return 1; }
    close(fd);
    /* A poll while libm is there, so that its mappings are read with it. */
    struct pollfd hole = { .fd = -1 };
    poll(&hole, 1, 0);
    usleep(200 * 1000);
    if (munmap(at, size) != 0) { perror("munmap"); return 1; }
    unsigned char *code = mmap(at, 4096, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (code == MAP_FAILED) { perror("mmap code"); return 1; }
    /* sub rsp, 8; mov rax, poll; call rax; add rsp, 8; ret */
    uint64_t target = (uint64_t)(uintptr_t)&poll;
    unsigned char body[] = { 0x48, 0x83, 0xec, 0x08, 0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0,
                             0xff, 0xd0, 0x48, 0x83, 0xc4, 0x08, 0xc3 };
    memcpy(body + 6, &target, sizeof target);
    memcpy(code, body, sizeof body);
    if (mprotect(code, 4096, PROT_READ | PROT_EXEC) != 0) { perror("mprotect"); return 1; }
    usleep(200 * 1000);
    poll_fn jitted = (poll_fn)(void *)code;
    for (int i = 0; i < calls; i++) {
        if (jitted(&hole, 1, 0) != 0) { perror("poll"); return 1; }
    }
    return 0;
}
