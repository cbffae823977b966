/*
 * train_compare.h - comparisons of two ctrain runs' outputs (train_dir folders), shared by the
 * data-parallel tests: the in-process one (test_data_parallel.c) and the multi-process one over
 * the CPU ring (test_ctrain_ring.c). Failures go through ct_test.h's assertions.
 */
#ifndef TRAIN_COMPARE_H
#define TRAIN_COMPARE_H

/* Same number of evaluation rows; per epoch the training loss within 1e-6 + 1e-5 relative, and
 * every HR/NDCG@10 (sampled and full ranking, validation and test) within 0.0041 - one user's
 * rank moving by one place (the runs differ in float summation order only). */
void train_same_metrics(const char *dir_a, const char *dir_b);

/* final.safetensors: every model tensor within 1e-4 + 1e-4 relative (mHC's mapping biases sit
 * near 3.5, where the sigmoid's slope is small and Adam turns rounding into visible steps),
 * except the key biases (the key part of
 * each SASRec in_proj_bias, TiSASRec's K_w.bias), whose true gradient is exactly zero (adding a
 * constant to every key shifts a softmax row uniformly), so both runs feed Adam pure rounding
 * noise, which Adam scales up to steps of +-lr in arbitrary directions; it has no effect on any
 * output. Optimizer moments are not compared. */
void train_same_params(const char *dir_a, const char *dir_b);

/* final.safetensors of both: every tensor (model and optimizer) bit for bit, and the same step. */
void train_same_bits(const char *dir_a, const char *dir_b);

#endif /* TRAIN_COMPARE_H */
