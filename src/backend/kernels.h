/* The kernels of a transformer forward, as the backends provide them.
 *
 * Each call queues one kernel on a compute stream (device.h) of the device
 * that holds its buffers; every pointer is a device address (what dbuf_ptr
 * gives, plus offsets), except where a parameter says host. Activations
 * compute in f32; weights may be stored in f32, f16 or bf16 and are widened
 * on the fly, or in GGUF's block types (core/quant.h), computed in place. The wrappers check their
 * arguments (an invalid one is a broken invariant of the caller and asserts) and dispatch to the
 * stream's backend table (kernels_impl.h); they return 0, or a negative error code with a message
 * when the backend fails (a CUDA launch error, say).
 *
 * The kernel layer knows no model: shapes come in as numbers and layouts are
 * stated here, so a model file is a flat list of these calls.
 *
 * A backend need not run every kernel (ggml's supports_op): kern_supports
 * says what a device runs, a model states what it calls (model.h:
 * model_required_ops) and registration refuses a device that lacks one, so
 * a new op can land on the CPU first. A kernel called on a device that
 * lacks it returns ERR_UNSUPPORTED naming the op and the device.
 */
#ifndef SHARDSWAP_BACKEND_KERNELS_H
#define SHARDSWAP_BACKEND_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/device.h"
#include "backend/weight.h"

enum kern_act {
    KERN_ACT_RELU,
    KERN_ACT_GELU,      /* exact, erf-based */
    KERN_ACT_GELU_TANH, /* tanh approximation */
    KERN_ACT_SILU,
};

/* One layer's KV cache for a batch: k and v each (batch, kv_heads, max_t,
 * head_dim), row p holding position p, and key_ok (batch, max_t): 1 where a
 * cached position holds a real token, 0 for padding and positions not yet
 * written. heads are the
 * query heads: grouped-query attention shares each KV head among
 * heads / kv_heads consecutive query heads (query head h reads KV head
 * h / (heads / kv_heads)); kv_heads == heads is multi-head attention.
 * heads % kv_heads == 0.
 * window > 0: a query at cache position p sees only the keys in
 * (p - window, p] (attention within a sliding window, as transformers masks
 * it); 0: every earlier key. softcap > 0: each score s becomes
 * softcap * tanh(s / softcap) before the mask and softmax (Gemma 2's
 * attention logit soft-capping); 0: none.
 * ring > 0 (with a window): k and v are (batch, kv_heads, ring, head_dim)
 * instead and keep only the last `ring` positions, position p at row
 * p % ring (a ring per sequence); key_ok stays (batch, max_t), by position.
 * Every call then has ring >= window + t_new - 1, so a step's new keys never
 * overwrite a key one of its queries sees. 0: no ring. */
struct kv_geom {
    int batch, heads, kv_heads, head_dim, max_t;
    int window;
    float softcap;
    int ring;
};

/* The precision a linear layer computes in (activations stay f32 between
 * kernels either way; accumulation is always f32).
 * - KERN_COMPUTE_F32: x in f32, weights widened exactly; transformers' f32
 *   results within 1e-4. Block-type weights are dequantized (in blocks of
 *   rows, never a whole copy) exactly as core/quant.h says.
 * - KERN_COMPUTE_BF16: x rounded to bf16 (nearest even), weights in bf16
 *   (f16 and f32 weights may be rounded to bf16), products summed in f32:
 *   what transformers and vLLM do for a bf16 model, and what bf16 matrix
 *   hardware (AMX, AVX512-BF16) runs at full speed. With block-type
 *   weights, x is quantized as llama.cpp does (per block of 32 to Q8_0 for
 *   Q8_0/Q4_0 weights, of 256 to Q8_K for the K-quants) and the blocks'
 *   integer dot products are scaled and summed in f32. */
enum kern_compute {
    KERN_COMPUTE_F32,
    KERN_COMPUTE_BF16,
};

/* What a device may or may not run: one op per kernel below, the
 * activations one per kind (kern_act_op, kern_gated_op), and kern_linear
 * with a bias apart from kern_linear without one. kern_to_host,
 * kern_to_device and kern_attention_scratch are not ops: every device has
 * them. */
enum kern_op {
    KERN_OP_LINEAR,      /* kern_linear, bias NULL */
    KERN_OP_LINEAR_BIAS, /* kern_linear with a bias */
    KERN_OP_EMBED,
    KERN_OP_LAYERNORM,
    KERN_OP_RMSNORM,
    KERN_OP_ROPE,
    KERN_OP_RELU, /* kern_activation with each enum kern_act, in its order */
    KERN_OP_GELU,
    KERN_OP_GELU_TANH,
    KERN_OP_SILU,
    KERN_OP_REGLU, /* kern_gated_act with each enum kern_act, in its order */
    KERN_OP_GEGLU,
    KERN_OP_GEGLU_TANH,
    KERN_OP_SWIGLU,
    KERN_OP_ADD,
    KERN_OP_SCALE,
    KERN_OP_KV_APPEND,
    KERN_OP_ATTENTION,
    KERN_OP_GATHER_ROWS,
    KERN_OP_COPY,
    KERN_OP_SOFTCAP,           /* kern_softcap */
    KERN_OP_ATTENTION_WINDOW,  /* kern_attention with kv_geom.window > 0 */
    KERN_OP_ATTENTION_SOFTCAP, /* kern_attention with kv_geom.softcap > 0 */
    /* kern_linear and kern_embed with weights of a block type, one op per
     * type (kern_weight_ops): a device runs a quantized model only with
     * the kernels for each of its types */
    KERN_OP_W_Q8_0,
    KERN_OP_W_Q4_0,
    KERN_OP_W_Q4_K,
    KERN_OP_W_Q5_K,
    KERN_OP_W_Q6_K,
    KERN_OP_W_Q5_0,
    KERN_OP_W_Q5_1,
    KERN_OP_LORA,         /* kern_lora */
    KERN_OP_COMBINE_ROWS, /* kern_combine_rows */
    KERN_OP_W_CT_I8,      /* compressed-tensors' repacked types (core/quant_ct.h) */
    KERN_OP_W_CT_I4,
    KERN_OP_W_CT_F8,
    KERN_OP_ROUTE_TOPK, /* kern_route_topk and kern_route_group */
    KERN_OP_COUNT
};
/* A set of ops: a mask of these bits. */
#define KERN_OP_BIT(op) ((uint64_t)1 << (op))

/* "rmsnorm", "swiglu", ...: the op as messages name it (static). */
const char *kern_op_name(enum kern_op op);
/* The op of kern_activation / kern_gated_act with act. */
enum kern_op kern_act_op(enum kern_act act);
enum kern_op kern_gated_op(enum kern_act act);
/* What weights of type t need beyond kern_linear / kern_embed themselves
 * (KERN_OP_BITs): the block type's op, or 0 for f32, f16 and bf16. A model
 * ORs these over its weights' types into its required ops. */
uint64_t kern_weight_ops(enum dtype t);
/* Whether d runs op: its backend's table has the kernel, less what the
 * backend declares it refuses. Another process's device (device_open_view)
 * answers for its owner: the same program's table of the owner's kind. */
bool kern_supports(const struct device *d, enum kern_op op);
/* Every op d runs, as KERN_OP_BITs. */
uint64_t kern_supported(const struct device *d);
/* The layout d's kernels want for a matrix of type t and `rows` rows in a
 * blob filled for d (weight.h's pack): WEIGHT_PACK_X16 where this
 * process's CPU measured its kernels on packed rows faster (a block type
 * with a packed layout, core/qpack.h, and 16 rows or more), else
 * WEIGHT_PACK_ROWS (another process's device, CUDA). */
enum weight_pack kern_weight_pack(const struct device *d, enum dtype t, int rows);
/* The largest head_dim d's kern_attention takes (0: no limit). */
int kern_attention_max_head_dim(const struct device *d);
/* 0 when d runs every op of ops (KERN_OP_BITs) and, when ops holds
 * attention, its heads of head_dim; else ERR_UNSUPPORTED with one line
 * naming the device and the ops it lacks (or the limit). */
int kern_check(const struct device *d, uint64_t ops, int head_dim);

/* "f32" / "bf16", and back (0, or ERR_INVALID naming the choices). */
const char *kern_compute_name(enum kern_compute c);
int kern_compute_parse(const char *s, enum kern_compute *out);
/* A precision as a user configures it: "f32" or "bf16" (*set true, *out
 * that one), or NULL or "auto" (*set false: the checkpoint's,
 * model_compute_default). 0, or ERR_INVALID naming the three choices. */
int kern_compute_choice(const char *s, bool *set, enum kern_compute *out);

/* y[m, w.rows] = x[m, w.cols] @ w^T (+ bias[w.rows] when not NULL): torch's
 * Linear, computed in precision c. x and y are dense (row stride = width)
 * and do not overlap. A block-type w: cols and ld whole blocks. */
int kern_linear(struct stream *s, float *y, const float *x, int m, const struct weight_view *w,
                const float *bias, enum kern_compute c);
/* One product of kern_linear_group: y[m, w.rows] = x[m, w.cols] @ w^T
 * (+ bias[w.rows] when not NULL). */
struct kern_linear_job {
    float *y;
    const float *x;
    int m;
    struct weight_view w;
    const float *bias;
};
/* The n products of jobs (host memory, read before the call returns), each
 * as kern_linear computes it with the job's bias (bitwise the same on the CPU),
 * in one call so that a backend can spread all of their rows over its
 * threads at once: the experts of a mixture for a few tokens are many small
 * products, each too short to pay for a start of the threads. The jobs'
 * weights may be of any types, block types mixed in one call (a GGUF
 * layer's q, k and v can differ), each needing its op as for kern_linear.
 * No job's y overlaps another job's y or any job's x. A backend without the
 * kernel runs them one kern_linear each, so every device runs it. */
int kern_linear_group(struct stream *s, const struct kern_linear_job *jobs, int n,
                      enum kern_compute c);
/* One adapter's low-rank pair for one linear layer, this shard's part:
 * a (r, in) and b (out, r) as PEFT stores lora_A.weight and lora_B.weight
 * (f32, f16 or bf16), and scale = lora_alpha / r (lora_alpha / sqrt(r)
 * with rsLoRA). */
struct lora_pair {
    struct weight_view a, b;
    float scale;
};
/* Segmented low-rank update (Punica's SGMV): for each segment s < nseg,
 * the rows i in [seg[s], seg[s + 1]) of x (m, a.cols) get
 *   y[i, :] += pairs[s].scale * ((x[i, :] @ pairs[s].a^T) @ pairs[s].b^T),
 * the inner product computed in precision c (KERN_COMPUTE_BF16 rounds x
 * and the rank-r intermediate to bf16 before each product, as a bf16
 * model's two Linear calls do; the weights are widened exactly in either),
 * summed in f32. The scale multiplies the product's result, as PEFT's
 * `lora_B(lora_A(x)) * scaling` does, never the intermediate. A pair with no a.data (a
 * sequence of the base, or a layer the adapter does not target) adds
 * nothing; rows outside [seg[0], seg[nseg]) are untouched. What a row gets
 * depends only on that row and its pair, bitwise on the CPU: which other
 * segments share the call changes nothing. seg (nseg + 1, ascending) and
 * pairs (nseg) are host memory, read before the call returns; y and x do
 * not overlap. scratch: kern_lora_scratch() floats on the device. */
int kern_lora(struct stream *s, float *y, const float *x, int m, int nseg, const int *seg,
              const struct lora_pair *pairs, enum kern_compute c, float *scratch);
/* Floats of scratch kern_lora needs for m rows with ranks up to max_r. */
size_t kern_lora_scratch(int m, int max_r);
/* y[i, w.cols] = row ids[i] - row0 of table w, widened (dequantized) to f32, or zeros when
 * that row is outside [0, w.rows) (a vocabulary-parallel shard looks up only
 * its own rows). ids: (n) on the device. */
int kern_embed(struct stream *s, float *y, const struct weight_view *w, const int32_t *ids, int n,
               int row0);
/* y = LayerNorm(x) over m rows of width n; gamma and beta both NULL (no
 * affine) or both set. y may equal x. */
int kern_layernorm(struct stream *s, float *y, const float *x, int m, int n, const float *gamma,
                   const float *beta, float eps);
/* y = x * rsqrt(mean(x^2) + eps) * gamma over m rows of width n, in that
 * order and in f32 as transformers' LlamaRMSNorm computes it (the mean of
 * squares summed accurately, in double); gamma NULL: no weight. y may equal
 * x. */
int kern_rmsnorm(struct stream *s, float *y, const float *x, int m, int n, const float *gamma,
                 float eps);
/* Rotary position embedding in place, transformers' rotate_half convention
 * (apply_rotary_pos_emb with cos/sin = cat(freqs, freqs)). x: n rows (one
 * per token) of heads * head_dim; in every head the first rot_dim elements
 * rotate (rot_dim even, <= head_dim) and the rest stay. With half =
 * rot_dim / 2, for i < half: a = (float)pos[r] * inv_freq[i] (an f32
 * product), c = cosf(a) * scale, s = sinf(a) * scale, and
 *   x[i]        = x[i] * c - x[i + half] * s
 *   x[i + half] = x[i + half] * c + x[i] * s.
 * pos: (n) positions >= 0; inv_freq: (half); both on the device. scale is
 * the attention scaling of rope variants that have one (1 otherwise). */
int kern_rope(struct stream *s, float *x, int n, int heads, int head_dim, int rot_dim,
              const int32_t *pos, const float *inv_freq, float scale);
/* x = act(x), n elements. */
int kern_activation(struct stream *s, float *x, size_t n, enum kern_act act);
/* y[i] = act(gate[i]) * up[i], n elements (act as kern_activation computes
 * it): the gated MLP (SwiGLU with KERN_ACT_SILU). y may equal gate or up. */
int kern_gated_act(struct stream *s, float *y, const float *gate, const float *up, size_t n,
                   enum kern_act act);
/* y[i] += x[i] */
int kern_add(struct stream *s, float *y, const float *x, size_t n);
/* x[i] *= a */
int kern_scale(struct stream *s, float *x, size_t n, float a);
/* x[i] = cap * tanh(x[i] / cap), cap > 0: tanh soft-capping (Gemma 2's
 * final logits). */
int kern_softcap(struct stream *s, float *x, size_t n, float cap);
/* Writes the keys and values of t_new new positions into the cache at
 * positions [pos, pos + t_new) of every sequence (rows (pos + t) % ring of a
 * ring, t_new <= ring): k and v are (batch * t_new, kv_heads * head_dim),
 * sequence-major. */
int kern_kv_append(struct stream *s, float *kc, float *vc, const float *k, const float *v,
                   const struct kv_geom *g, int t_new, int pos);
/* Causal attention of every sequence's t_new queries against its cache.
 * q:   (batch * t_new, heads * head_dim), already scaled; out the same shape.
 * Query head h attends with KV head h / (heads / kv_heads) (struct kv_geom).
 * Query t of a sequence sits at position past + t and attends to the keys
 * s <= past + t with key_ok[s] (and s > past + t - g->window when the
 * geometry has a window; read from row s % ring of a ring, whose
 * ring >= window + t_new - 1); a query that sees no key (a pad before any real
 * token) gets 0. Scores are soft-capped first when g->softcap > 0.
 * scratch: kern_attention_scratch() floats. */
int kern_attention(struct stream *s, float *out, const float *q, const float *kc, const float *vc,
                   const uint8_t *key_ok, const struct kv_geom *g, int past, int t_new,
                   float *scratch);
/* Floats of scratch kern_attention on d needs for t_new queries over t_all
 * keys; d NULL: on a CPU device (for sizing a device before opening it). */
size_t kern_attention_scratch(const struct device *d, const struct kv_geom *g, int t_new,
                              int t_all);
/* y[i, width] = x[rows[i], width] for i < n; rows on the device. */
int kern_gather_rows(struct stream *s, float *y, const float *x, const int32_t *rows, int n,
                     int width);
/* y[i, :] = sum over j < k of w[i * k + j] * x[rows[i * k + j], :] for
 * i < n, in j order from the first product (each product rounded to f32,
 * then added): a mixture of experts' outputs, each token's k weighted rows
 * summed (torch's index_add_ of each expert's weighted rows into zeros, in
 * the experts' order when the caller lists them so). rows and w (n * k) on
 * the device; y does not overlap x. */
int kern_combine_rows(struct stream *s, float *y, const float *x, const int32_t *rows,
                      const float *w, int n, int k, int width);
/* The most experts and the most choices per token kern_route_topk takes. */
#define KERN_ROUTE_MAX_EXPERTS 256
#define KERN_ROUTE_MAX_K 16

/* What a mixture of experts' routing reads besides its logits. */
struct kern_route {
    int n, n_experts, top_k; /* tokens; 1 <= top_k <= n_experts */
    bool norm;               /* each token's top_k weights renormalised to sum to 1 */
    /* token i is real (counted in the second row of counts) when
     * real[(i / real_group) * real_stride + i % real_group] != 0; real
     * NULL: every token */
    const uint8_t *real;
    int real_group, real_stride;
    /* kern_route_group: the experts that get rows on this device, those in
     * [expert_begin, expert_end) with have[e] != 0 (have: host memory,
     * n_experts bytes, read before the call returns; NULL: all of them) */
    int expert_begin, expert_end;
    const uint8_t *have;
    /* slots per token in the output: top_k, or top_k + 1 with shared_gate */
    int slot_stride;
    /* (n) logits of a shared expert's gate, or NULL: slot top_k of token i
     * is then row n * top_k + i, weighted by sigmoid(shared_gate[i]) */
    const float *shared_gate;
};

/* What the routing writes, every buffer on the device. */
struct kern_route_out {
    int32_t *choice; /* (n, top_k) each token's experts, ascending */
    float *choice_w; /* (n, top_k) their weights */
    int32_t *counts; /* (2, n_experts) tokens per expert: all of them, the real ones */
    int32_t *rows;   /* (n * top_k) the routed rows, grouped by expert */
    int32_t *slots;  /* (n, slot_stride) each choice's row of the experts' outputs */
    float *slot_w;   /* (n, slot_stride) its weight */
};

/* A mixture of experts' routing on the device, as transformers computes
 * Mixtral's and Qwen-MoE's routers, in two calls: between them the host
 * reads the counts (the products' row counts, the router's statistics,
 * the experts to load) and says which experts it has.
 * kern_route_topk: logits (n, n_experts) -> choice, choice_w, counts:
 * - p = softmax(logits[i]) in f32: the max subtracted, expf, summed in
 *   expert order, each divided by the sum;
 * - the top_k experts by p, the higher first, ties to the lower index;
 *   their weights p, divided by their sum (added in that order) when
 *   r->norm; choice and choice_w list them by ascending expert;
 * - counts[e] the tokens that chose e, counts[n_experts + e] the real ones
 *   among them.
 * kern_route_group: choice, choice_w and counts as kern_route_topk wrote
 * them -> rows, slots, slot_w, the grouping kern_gather_rows and
 * kern_combine_rows take. With at[e] = the counts of the experts with rows
 * (struct kern_route) below e and nl = their sum:
 * - rows[at[e] + c] = the c-th token (in token order) that chose e, for
 *   each expert with rows; rows[nl, n * top_k) = 0;
 * - slots[i * slot_stride + j] = the row of token i's j-th choice (at[e] +
 *   c), weighted by its choice_w, or nl weighted by 0 for an expert
 *   without rows (that row is the caller's zeros); then the shared
 *   expert's slot.
 * The CPU computes this bit for bit as the model step did on the host; a
 * GPU's expf may differ by an ulp or two, so its weights may, and its
 * choices only where two probabilities are that close. */
int kern_route_topk(struct stream *s, const float *logits, const struct kern_route *r,
                    const struct kern_route_out *out);
int kern_route_group(struct stream *s, const struct kern_route *r,
                     const struct kern_route_out *out);
/* dst = src, n bytes on the device (ranges do not overlap). */
int kern_copy(struct stream *s, void *dst, const void *src, size_t n);
/* Copies n bytes from the device to host memory once the stream's earlier
 * work is done, and returns when the bytes are there (a sync point). */
int kern_to_host(struct stream *s, void *host, const void *src, size_t n);
/* Copies n bytes of host memory to the device in stream order; host may be
 * reused when this returns. */
int kern_to_device(struct stream *s, void *dst, const void *host, size_t n);

#endif
