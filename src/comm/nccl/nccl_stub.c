/* comm_group_create_cuda when the library is built without CUDA: a group
 * of CUDA devices cannot exist, since no CUDA device can be opened. */
#include <stddef.h>

#include "comm/comm_cuda.h"
#include "core/error.h"

int comm_group_create_cuda(struct device *const *devices, int n_ranks, struct comm_group **out)
{
    (void)devices;
    *out = NULL;
    return err_set(ERR_UNSUPPORTED, "comm: %d CUDA ranks: built without CUDA support", n_ranks);
}
