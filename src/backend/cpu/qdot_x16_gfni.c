/* `vnni-x16` built again with GFNI (CMakeLists.txt adds -mgfni): Q6_K's
 * top bits moved to their place and masked by one GF2P8AFFINEQB each where
 * a shift and a mask took two (qdot_x16.c), the same bits. qlinear.c calls
 * it in vnni-x16's place where the CPU has GFNI. */
#define XV_GFNI_BUILD
#define QDOT_X16_FN qdot_x16_vnni_gfni
#include "qdot_x16.c"
