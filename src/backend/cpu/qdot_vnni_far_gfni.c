/* `vnni-far` built again with GFNI, as qdot_vnni_near_gfni.c builds
 * vnni-near: qlinear.c calls it in vnni-far's place where the CPU has
 * GFNI. */
#define QD_GFNI_BUILD
#define QDOT_PIECES_FN qdot_pieces_vnni_far_gfni
#include "qdot_vnni_far.c"
