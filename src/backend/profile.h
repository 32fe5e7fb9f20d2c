/* Where a forward's time goes, kernel by kernel, on a device whose streams
 * are synchronous (the CPU backend: a kernel call returns when its work is
 * done, so the time around the call is the kernel's).
 *
 * kern_profile_start puts a table of timing trampolines in front of the
 * device's kernel table; every kernel called on it from then on adds its
 * seconds and one call to its op (linear also the weight bytes it read),
 * until kern_profile_stop puts the device's own table back and adds what was
 * counted to *out. One device is profiled at a time (bench forward's), and
 * the counts are kept by its one compute thread: start and stop while no
 * kernel runs on it. Kernels the trampolines do not know run unprofiled. */
#ifndef SHARDSWAP_BACKEND_PROFILE_H
#define SHARDSWAP_BACKEND_PROFILE_H

#include <stdint.h>

#include "backend/device.h"
#include "backend/kernels.h"

/* The ops, then the two copies that are not ops, then kern_linear_group
 * (its products count into linear_bytes too). */
enum {
    KERN_PROFILE_TO_HOST = KERN_OP_COUNT,
    KERN_PROFILE_TO_DEVICE,
    KERN_PROFILE_LINEAR_GROUP,
    KERN_PROFILE_SLOTS
};

/* The linear products of one weight shape and type: kern_linear's calls,
 * and kern_linear_group's jobs (each job's share of its call's time by
 * its share of the call's bytes). */
struct kern_profile_shape {
    int rows, cols; /* 0 x 0: every shape past the table's room */
    enum dtype dtype;
    uint64_t calls;
    double seconds, bytes;
};
#define KERN_PROFILE_SHAPES 32

struct kern_profile {
    double seconds[KERN_PROFILE_SLOTS];
    uint64_t calls[KERN_PROFILE_SLOTS];
    double linear_bytes; /* weight bytes the linear calls read */
    double group_bytes;  /* of which kern_linear_group's */
    int n_shapes;        /* the linear calls by weight shape, in first-call order */
    struct kern_profile_shape shape[KERN_PROFILE_SHAPES];
};

/* The name of profile slot i: kern_op_name, or "to host" / "to device" /
 * "linear group". */
const char *kern_profile_name(int i);

/* 0, or ERR_UNSUPPORTED when d's streams are not synchronous (a GPU), or
 * ERR_BUSY when a device is profiled already. */
int kern_profile_start(struct device *d);
/* Adds what was counted since kern_profile_start(d) to *out (out may be
 * NULL) and puts d's own table back. */
void kern_profile_stop(struct device *d, struct kern_profile *out);

#endif
