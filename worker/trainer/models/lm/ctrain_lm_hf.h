/*
 * ctrain_lm_hf.h - a Hugging Face model folder's weights: reading them into float32 views
 * (model.safetensors, or the shards a model.safetensors.index.json maps; float32, float16 and
 * bfloat16 tensors, the half types converted on load), and writing a folder transformers loads
 * back (config.json and the tokenizer files copied from the folder the model came from,
 * model.safetensors with every tensor under its transformers name).
 *
 * Names: a view is looked up under its own name, then with the backbone's prefix changed, as
 * transformers does when a checkpoint saved from the bare model (h.0.ln_1.weight) is loaded into
 * the model with a head (transformer.h.0.ln_1.weight) or the other way round.
 *
 * Not here: config.json (ctrain_lm_cfg.h), which tensors a model has, the tokenizer.
 */
#ifndef CTRAIN_LM_HF_H
#define CTRAIN_LM_HF_H

#include <stddef.h>

#include "ct_error.h"
#include "ctworker.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctrain_lm_hf ctrain_lm_hf_t;

/* Opens dir's weights: dir/model.safetensors, else dir/model.safetensors.index.json (whose
 * "weight_map" names the shard of every tensor; shard names must be plain file names inside
 * dir). Shards are opened when first needed. Errors are one line naming the file: no weights
 * (with a word on pytorch_model.bin, which ctrain does not read), a damaged index or file. */
int ctrain_lm_hf_open(ctrain_lm_hf_t **out, const char *dir, ct_errbuf_t *eb);
void ctrain_lm_hf_close(ctrain_lm_hf_t *h); /* NULL is fine */

/* Reads the n views (F32, host memory) from the folder. Every view's tensor must exist (under
 * its name or with the backbone prefix `prefix` - "transformer.", "model." - removed or added)
 * with the view's shape and a float dtype (F32, F16, BF16; the half types are converted
 * exactly). Everything is checked before any byte is read; the first problem is one line that
 * names the tensor, what the file has and the shape expected. Tensors no view names are ignored.
 * Returns 0, CT_EMISMATCH, CT_EFORMAT, CT_ECRC, -ENOMEM or -errno. */
int ctrain_lm_hf_read(ctrain_lm_hf_t *h, const ct_tensor_view_t *views, size_t n,
                      const char *prefix, ct_errbuf_t *eb);

/* Writes dir (created when missing) as a folder transformers loads: model.safetensors holding
 * the n F32 views (metadata "format": "pt"), and config.json plus whichever tokenizer and
 * generation files src_dir has (tokenizer.json, tokenizer_config.json, special_tokens_map.json,
 * vocab.json, merges.txt, added_tokens.json, generation_config.json), copied byte for byte. A
 * model.safetensors.index.json left in dir by an earlier export is removed. Every file is
 * replaced atomically. */
int ctrain_lm_hf_save(const char *dir, const char *src_dir, const ct_tensor_view_t *views, size_t n,
                      ct_errbuf_t *eb);

/* Float16 and bfloat16 (as stored, little-endian 16-bit words) to float32, exactly. */
float ctrain_lm_hf_f16_to_f32(uint16_t h);
float ctrain_lm_hf_bf16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_LM_HF_H */
