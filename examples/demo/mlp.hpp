// examples/demo/mlp.hpp — a small multi-layer perceptron trained with plain
// C++ loops: ReLU hidden layers, softmax cross-entropy, SGD with momentum.
//
//   stepscope_example::Mlp model({32, 128, 128, 8}, /*seed=*/1);
//   float loss = model.forward(inputs, labels, batch);  // inputs: batch x 32, row-major
//   model.backward();                                   // fills model.gradients()
//   model.sgd_step(0.05f, 0.9f);
//
// Dependency-free on purpose: the examples measure real matrix math, so the
// kernels below are written for the cache (row-major, unit-stride inner loops
// the compiler vectorises), not for peak FLOPs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

namespace stepscope_example {

// C[m x n] = A[m x k] * B[k x n]. i-p-j order: the inner loop walks a row of B
// and a row of C with unit stride.
inline void gemm_nn(int m, int n, int k, const float* a, const float* b, float* c) {
  std::fill(c, c + static_cast<std::size_t>(m) * static_cast<std::size_t>(n), 0.0f);
  for (int i = 0; i < m; ++i) {
    float* c_row = c + static_cast<std::size_t>(i) * static_cast<std::size_t>(n);
    const float* a_row = a + static_cast<std::size_t>(i) * static_cast<std::size_t>(k);
    for (int p = 0; p < k; ++p) {
      const float a_ip = a_row[p];
      const float* b_row = b + static_cast<std::size_t>(p) * static_cast<std::size_t>(n);
      for (int j = 0; j < n; ++j) c_row[j] += a_ip * b_row[j];
    }
  }
}

// C[m x n] = A^T * B with A stored [k x m] and B [k x n] (weight gradients:
// activations^T * output gradients).
inline void gemm_tn(int m, int n, int k, const float* a, const float* b, float* c) {
  std::fill(c, c + static_cast<std::size_t>(m) * static_cast<std::size_t>(n), 0.0f);
  for (int p = 0; p < k; ++p) {
    const float* a_row = a + static_cast<std::size_t>(p) * static_cast<std::size_t>(m);
    const float* b_row = b + static_cast<std::size_t>(p) * static_cast<std::size_t>(n);
    for (int i = 0; i < m; ++i) {
      const float a_pi = a_row[i];
      float* c_row = c + static_cast<std::size_t>(i) * static_cast<std::size_t>(n);
      for (int j = 0; j < n; ++j) c_row[j] += a_pi * b_row[j];
    }
  }
}

// C[m x n] = A * B^T with A [m x k] and B stored [n x k] (input gradients:
// output gradients * weights^T). B is transposed into `scratch` first so the
// product runs as gemm_nn: a dot-product loop would be a float reduction the
// compiler may not vectorise without -ffast-math.
inline void gemm_nt(int m, int n, int k, const float* a, const float* b, float* c, std::vector<float>& scratch) {
  scratch.resize(static_cast<std::size_t>(n) * static_cast<std::size_t>(k));
  for (int j = 0; j < n; ++j)
    for (int p = 0; p < k; ++p)
      scratch[static_cast<std::size_t>(p) * static_cast<std::size_t>(n) + static_cast<std::size_t>(j)] =
          b[static_cast<std::size_t>(j) * static_cast<std::size_t>(k) + static_cast<std::size_t>(p)];
  gemm_nn(m, n, k, a, scratch.data(), c);
}

class Mlp {
 public:
  // sizes = {inputs, hidden..., classes}; at least one layer.
  Mlp(std::vector<int> sizes, unsigned seed) : sizes_(std::move(sizes)) {
    std::size_t total = 0;
    for (std::size_t l = 0; l + 1 < sizes_.size(); ++l) {
      Layer layer;
      layer.in = sizes_[l];
      layer.out = sizes_[l + 1];
      layer.w = total;
      total += static_cast<std::size_t>(layer.in) * static_cast<std::size_t>(layer.out);
      layer.b = total;
      total += static_cast<std::size_t>(layer.out);
      layers_.push_back(layer);
    }
    params_.assign(total, 0.0f);
    grads_.assign(total, 0.0f);
    velocity_.assign(total, 0.0f);
    // He initialisation: keeps ReLU activations at unit scale layer after layer.
    std::mt19937 rng(seed);
    for (const Layer& layer : layers_) {
      std::normal_distribution<float> normal(0.0f, std::sqrt(2.0f / static_cast<float>(layer.in)));
      const std::size_t n = static_cast<std::size_t>(layer.in) * static_cast<std::size_t>(layer.out);
      for (std::size_t i = 0; i < n; ++i) params_[layer.w + i] = normal(rng);
    }
  }

  // Runs the batch forward, keeps the activations for backward(), returns the
  // mean cross-entropy loss. inputs: batch x sizes[0], labels in [0, classes).
  float forward(const float* inputs, const int* labels, int batch) {
    batch_ = batch;
    labels_.assign(labels, labels + batch);
    activations_.resize(layers_.size() + 1);
    activations_[0].assign(inputs, inputs + static_cast<std::size_t>(batch) * static_cast<std::size_t>(sizes_[0]));
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const Layer& layer = layers_[l];
      std::vector<float>& out = activations_[l + 1];
      out.resize(static_cast<std::size_t>(batch) * static_cast<std::size_t>(layer.out));
      gemm_nn(batch, layer.out, layer.in, activations_[l].data(), &params_[layer.w], out.data());
      const float* bias = &params_[layer.b];
      const bool hidden = l + 1 < layers_.size();
      for (int r = 0; r < batch; ++r) {
        float* row = out.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(layer.out);
        for (int j = 0; j < layer.out; ++j) {
          row[j] += bias[j];
          if (hidden) row[j] = std::max(row[j], 0.0f);
        }
      }
    }
    // Softmax cross-entropy on the logits; the probabilities stay for backward().
    const int classes = sizes_.back();
    std::vector<float>& logits = activations_.back();
    float loss = 0.0f;
    correct_ = 0;
    for (int r = 0; r < batch; ++r) {
      float* row = logits.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(classes);
      const int best = static_cast<int>(std::max_element(row, row + classes) - row);
      if (best == labels[r]) ++correct_;
      const float top = row[best];
      float sum = 0.0f;
      for (int j = 0; j < classes; ++j) {
        row[j] = std::exp(row[j] - top);
        sum += row[j];
      }
      for (int j = 0; j < classes; ++j) row[j] /= sum;
      loss -= std::log(std::max(row[labels[r]], 1e-12f));
    }
    return loss / static_cast<float>(batch);
  }

  // Gradients of the last forward()'s mean loss into gradients().
  void backward() {
    const int batch = batch_;
    const int classes = sizes_.back();
    // d loss / d logits = (softmax - one_hot) / batch
    delta_ = activations_.back();
    for (int r = 0; r < batch; ++r)
      delta_[static_cast<std::size_t>(r) * static_cast<std::size_t>(classes) +
             static_cast<std::size_t>(labels_[static_cast<std::size_t>(r)])] -= 1.0f;
    const float inv_batch = 1.0f / static_cast<float>(batch);
    for (float& d : delta_) d *= inv_batch;
    for (std::size_t l = layers_.size(); l-- > 0;) {
      const Layer& layer = layers_[l];
      gemm_tn(layer.in, layer.out, batch, activations_[l].data(), delta_.data(), &grads_[layer.w]);
      float* grad_bias = &grads_[layer.b];
      std::fill(grad_bias, grad_bias + layer.out, 0.0f);
      for (int r = 0; r < batch; ++r) {
        const float* row = delta_.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(layer.out);
        for (int j = 0; j < layer.out; ++j) grad_bias[j] += row[j];
      }
      if (l == 0) break;  // no gradient needed for the inputs
      previous_delta_.resize(static_cast<std::size_t>(batch) * static_cast<std::size_t>(layer.in));
      gemm_nt(batch, layer.in, layer.out, delta_.data(), &params_[layer.w], previous_delta_.data(), transposed_);
      // ReLU: the gradient passes where the activation was positive.
      const std::vector<float>& act = activations_[l];
      for (std::size_t i = 0; i < previous_delta_.size(); ++i)
        if (act[i] <= 0.0f) previous_delta_[i] = 0.0f;
      delta_.swap(previous_delta_);
    }
  }

  void sgd_step(float learning_rate, float momentum) {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      velocity_[i] = momentum * velocity_[i] - learning_rate * grads_[i];
      params_[i] += velocity_[i];
    }
  }

  // Fraction of the last forward()'s batch classified correctly.
  float accuracy() const { return batch_ > 0 ? static_cast<float>(correct_) / static_cast<float>(batch_) : 0.0f; }
  // All parameters' gradients, flat (what a data-parallel run all-reduces).
  std::vector<float>& gradients() { return grads_; }
  std::size_t parameter_count() const { return params_.size(); }
  // Multiply-adds of one forward + backward pass at this batch size (x2 = FLOPs).
  double multiply_adds(int batch) const {
    double macs = 0;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const double layer_macs = static_cast<double>(batch) * layers_[l].in * layers_[l].out;
      macs += layer_macs * (l == 0 ? 2 : 3);  // forward, weight grad, input grad (not for layer 0)
    }
    return macs;
  }

 private:
  struct Layer {
    int in = 0, out = 0;
    std::size_t w = 0, b = 0;  // offsets into params_/grads_: weights [in x out], bias [out]
  };
  std::vector<int> sizes_;
  std::vector<Layer> layers_;
  std::vector<float> params_, grads_, velocity_;
  std::vector<std::vector<float>> activations_;  // [0] inputs, [l+1] output of layer l (post-ReLU; probs last)
  std::vector<float> delta_, previous_delta_, transposed_;
  std::vector<int> labels_;
  int batch_ = 0;
  int correct_ = 0;
};

}  // namespace stepscope_example
