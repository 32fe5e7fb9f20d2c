/* `vnni-near` built again with GFNI (CMakeLists.txt adds -mgfni): the
 * K-quants' nibbles and Q6_K's top bits moved and masked by one
 * GF2P8AFFINEQB each where shifts and masks took two or three (qdot_k512.h),
 * the same bits. qlinear.c calls it in vnni-near's place where the CPU has
 * GFNI. */
#define QD_GFNI_BUILD
#define QDOT_ROWS_FN qdot_rows_vnni_near_gfni
#include "qdot_vnni_near.c"
