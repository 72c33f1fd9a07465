/* A test program for stacks: `rare_polls HOLES OPEN` polls HOLES times from
 * poll_with_holes(), each call with one fd = -1 entry (poll.fd_negative's rare arm), then
 * OPEN times from poll_open(), with open fds only. Built -O2 -fomit-frame-pointer, as
 * Debian builds its code: its stacks can only be walked with call-frame information.
 * Between the two it sleeps, so that the auditor reads its mappings while it runs. */
#include <poll.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* What the polls return, kept so that no call is a tail call. */
volatile int ready;

__attribute__((noinline)) void poll_with_holes(int fd) {
    struct pollfd fds[2] = {{.fd = -1}, {.fd = fd, .events = POLLIN}};
    ready += poll(fds, 2, 0);
}

__attribute__((noinline)) void poll_open(int fd) {
    struct pollfd fds[1] = {{.fd = fd, .events = POLLIN}};
    ready += poll(fds, 1, 0);
}

int main(int argc, char **argv) {
    int pipe_fds[2];
    if (argc != 3 || pipe(pipe_fds) != 0)
        return 2;
    for (long i = atol(argv[1]); i > 0; i--)
        poll_with_holes(pipe_fds[0]);
    struct timespec pause = {.tv_nsec = 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
    for (long i = atol(argv[2]); i > 0; i--)
        poll_open(pipe_fds[0]);
    return 0;
}
