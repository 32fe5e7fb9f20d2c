/* TEMPORARY: stands in for cuda_kernels.c until the kernel table lands, so
 * that the CUDA build links and the device and comm tests run. Only the
 * copies are real (cudaMemcpyAsync on the stream); every other kernel
 * answers ERR_UNSUPPORTED. Drop this file at merge. */
#include "backend/cuda/cuda_impl.h"

static int tmp_unsupported(struct stream *s, const char *what)
{
    return err_set(ERR_UNSUPPORTED, "device %s: %s: no CUDA kernels yet (temporary stub)",
                   device_name(stream_device(s)), what);
}

static int tmp_linear(struct stream *s, float *y, const float *x, int m,
                      const struct weight_view *w, const float *bias, enum kern_compute c)
{
    return tmp_unsupported(s, "linear");
}

static int tmp_embed(struct stream *s, float *y, const struct weight_view *w, const int32_t *ids,
                     int n, int row0)
{
    return tmp_unsupported(s, "embed");
}

static int tmp_layernorm(struct stream *s, float *y, const float *x, int m, int n,
                         const float *gamma, const float *beta, float eps)
{
    return tmp_unsupported(s, "layernorm");
}

static int tmp_activation(struct stream *s, float *x, size_t n, enum kern_act act)
{
    return tmp_unsupported(s, "activation");
}

static int tmp_add(struct stream *s, float *y, const float *x, size_t n)
{
    return tmp_unsupported(s, "add");
}

static int tmp_scale(struct stream *s, float *x, size_t n, float a)
{
    return tmp_unsupported(s, "scale");
}

static int tmp_kv_append(struct stream *s, float *kc, float *vc, const float *k, const float *v,
                         const struct kv_geom *g, int t_new, int pos)
{
    return tmp_unsupported(s, "kv_append");
}

static int tmp_attention(struct stream *s, float *out, const float *q, const float *kc,
                         const float *vc, const uint8_t *key_ok, const struct kv_geom *g, int past,
                         int t_new, float *scratch)
{
    return tmp_unsupported(s, "attention");
}

static size_t tmp_attention_scratch(const struct kv_geom *g, int t_new, int t_all)
{
    return 0;
}

static int tmp_gather_rows(struct stream *s, float *y, const float *x, const int32_t *rows, int n,
                           int width)
{
    return tmp_unsupported(s, "gather_rows");
}

static int tmp_copy(struct stream *s, void *dst, const void *src, size_t n)
{
    const char *dev = device_name(stream_device(s));
    CUDA_CHECK(dev, cudaSetDevice(cuda_device_gpu(stream_device(s))));
    CUDA_CHECK(dev, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, cuda_stream_handle(s)));
    return 0;
}

static int tmp_to_host(struct stream *s, void *host, const void *src, size_t n)
{
    const char *dev = device_name(stream_device(s));
    CUDA_CHECK(dev, cudaSetDevice(cuda_device_gpu(stream_device(s))));
    CUDA_CHECK(dev, cudaMemcpyAsync(host, src, n, cudaMemcpyDeviceToHost, cuda_stream_handle(s)));
    CUDA_CHECK(dev, cudaStreamSynchronize(cuda_stream_handle(s)));
    return 0;
}

static int tmp_to_device(struct stream *s, void *dst, const void *host, size_t n)
{
    const char *dev = device_name(stream_device(s));
    CUDA_CHECK(dev, cudaSetDevice(cuda_device_gpu(stream_device(s))));
    CUDA_CHECK(dev, cudaMemcpyAsync(dst, host, n, cudaMemcpyHostToDevice, cuda_stream_handle(s)));
    /* the host buffer may be reused when this returns */
    CUDA_CHECK(dev, cudaStreamSynchronize(cuda_stream_handle(s)));
    return 0;
}

const struct kernel_ops cuda_kernel_ops = {
    .linear = tmp_linear,
    .embed = tmp_embed,
    .layernorm = tmp_layernorm,
    .activation = tmp_activation,
    .add = tmp_add,
    .scale = tmp_scale,
    .kv_append = tmp_kv_append,
    .attention = tmp_attention,
    .attention_scratch = tmp_attention_scratch,
    .gather_rows = tmp_gather_rows,
    .copy = tmp_copy,
    .to_host = tmp_to_host,
    .to_device = tmp_to_device,
};

int cuda_kernels_stream_init(struct stream *s)
{
    (void)s;
    return 0;
}

void cuda_kernels_stream_free(struct stream *s)
{
    (void)s;
}
