// A model that parses but fails verification: q_proj is [8, 6] (in = 6) but
// the hidden state it multiplies has 8 features.
func.func @prefill(%tokens: tensor<?xi64>) -> tensor<?x8xf32> {
  %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
  %h = moe.embed %e, %tokens : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
  %w = moe.param "model.layers.0.self_attn.q_proj.weight" : tensor<8x6xf32>
  %q = moe.linear %h, %w : tensor<?x8xf32>, tensor<8x6xf32> -> tensor<?x8xf32>
  return %q : tensor<?x8xf32>
}
