// RUN: meshfold-opt %s -split-input-file -verify-diagnostics

// Verifier errors of the mf communication ops; the group sizes come from the
// module's plan (seed plan: TP = 2, CP = 2, EP = 16).


// An unknown mesh.
func.func @bad_mesh(%x: tensor<4x64xf32>) -> tensor<8x64xf32> {
  // expected-error @+1 {{mesh must be "attention" or "experts", got "tensor"}}
  %a = mf.all_gather %x on "tensor" ["tp"] dim 0 : tensor<4x64xf32> -> tensor<8x64xf32>
  return %a : tensor<8x64xf32>
}

// -----

// An axis the mesh does not have.
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @bad_axis(%x: tensor<4x64xf32>) -> tensor<8x64xf32> {
    // expected-error @+1 {{the attention mesh of the plan has no axis "ep"}}
    %a = mf.all_gather %x on "attention" ["ep"] dim 0 : tensor<4x64xf32> -> tensor<8x64xf32>
    return %a : tensor<8x64xf32>
  }
}

// -----

// No axes.
func.func @no_axes(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  // expected-error @+1 {{needs at least one axis}}
  %a = mf.all_reduce %x on "attention" [] : tensor<4x64xf32> -> tensor<4x64xf32>
  return %a : tensor<4x64xf32>
}

// -----

// An axis named twice.
func.func @twice(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  // expected-error @+1 {{axis "tp" named twice}}
  %a = mf.all_reduce %x on "attention" ["tp", "tp"] : tensor<4x64xf32> -> tensor<4x64xf32>
  return %a : tensor<4x64xf32>
}

// -----

// The all-gather must multiply the gathered dim by the group size.
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @ag_size(%x: tensor<4x64xf32>) -> tensor<16x64xf32> {
    // expected-error @+1 {{dim 0 must be multiplied by the group size 2, got 4 -> 16}}
    %a = mf.all_gather %x on "attention" ["tp"] dim 0 : tensor<4x64xf32> -> tensor<16x64xf32>
    return %a : tensor<16x64xf32>
  }
}

// -----

// The reduce-scatter must divide the scattered dim by the group size.
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @rs_size(%x: tensor<8x64xf32>) -> tensor<8x64xf32> {
    // expected-error @+1 {{dim 0 must be divided by the group size 2, got 8 -> 8}}
    %a = mf.reduce_scatter %x on "attention" ["tp"] dim 0 : tensor<8x64xf32> -> tensor<8x64xf32>
    return %a : tensor<8x64xf32>
  }
}

// -----

// Other dims stay.
func.func @ag_other_dim(%x: tensor<4x64xf32>) -> tensor<8x32xf32> {
  // expected-error @+1 {{dim 1 must be unchanged, got 64 and 32}}
  %a = mf.all_gather %x on "attention" ["tp"] dim 0 : tensor<4x64xf32> -> tensor<8x32xf32>
  return %a : tensor<8x32xf32>
}

// -----

// The gathered dim must exist.
func.func @ag_dim_range(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  // expected-error @+1 {{dim 2 out of range}}
  %a = mf.all_gather %x on "attention" ["tp"] dim 2 : tensor<4x64xf32> -> tensor<4x64xf32>
  return %a : tensor<4x64xf32>
}

// -----

// Element types are kept.
func.func @ag_elt(%x: tensor<4x64xf32>) -> tensor<8x64xbf16> {
  // expected-error @+1 {{element types differ}}
  %a = mf.all_gather %x on "attention" ["tp"] dim 0 : tensor<4x64xf32> -> tensor<8x64xbf16>
  return %a : tensor<8x64xbf16>
}

// -----

// A ring step returns what it sends.
func.func @ring_types(%k: tensor<?x2x8xf32>) -> tensor<?x4x8xf32> {
  // expected-error @+1 {{results must have the types of the inputs}}
  %k1 = mf.ring_step %k on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x4x8xf32>
  return %k1 : tensor<?x4x8xf32>
}

// -----

// A ring step sends something.
func.func @ring_empty() {
  // expected-error @+1 {{needs at least one tensor to send}}
  "mf.ring_step"() {mesh = "attention", axes = ["cp"]} : () -> ()
  return
}

// -----

// Experts must spread evenly over the EP group.
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @dispatch_experts(%x: tensor<?x64xf32>, %i: tensor<?x2xi64>, %w: tensor<?x2xf32>) {
    // expected-error @+1 {{num_experts 24 must be a multiple of the group size 16}}
    %rows, %local, %r = mf.dispatch %x, %i, %w on "experts" ["ep"] experts 24 flat : tensor<?x64xf32>, tensor<?x2xi64>, tensor<?x2xf32> -> tensor<?x64xf32>, tensor<?xi64>, !mf.dispatch
    return
  }
}

// -----

// Indices and weights have one shape.
func.func @dispatch_shapes(%x: tensor<?x64xf32>, %i: tensor<?x2xi64>, %w: tensor<?x4xf32>) {
  // expected-error @+1 {{must have one shape}}
  %rows, %local, %r = mf.dispatch %x, %i, %w on "experts" ["ep"] experts 32 flat : tensor<?x64xf32>, tensor<?x2xi64>, tensor<?x4xf32> -> tensor<?x64xf32>, tensor<?xi64>, !mf.dispatch
  return
}

// -----

// Rows keep the hidden size.
func.func @dispatch_rows(%x: tensor<?x64xf32>, %i: tensor<?x2xi64>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{must carry the input's hidden size}}
  %rows, %local, %r = mf.dispatch %x, %i, %w on "experts" ["ep"] experts 32 flat : tensor<?x64xf32>, tensor<?x2xi64>, tensor<?x2xf32> -> tensor<?x32xf32>, tensor<?xi64>, !mf.dispatch
  return
}

// -----

// Combine returns rows of the expert outputs' width.
func.func @combine_width(%r: !mf.dispatch, %o: tensor<?x64xf32>, %t: index) -> tensor<?x32xf32> {
  // expected-error @+1 {{must match the expert outputs' hidden size}}
  %y = mf.combine %r, %o tokens %t : !mf.dispatch, tensor<?x64xf32> -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// Combine returns rows of the expert outputs' element type.
func.func @combine_element_type(%r: !mf.dispatch, %o: tensor<?x64xbf16>, %t: index) -> tensor<?x64xf32> {
  // expected-error @+1 {{result 'tensor<?x64xf32>' must match the expert outputs' hidden size and element type ('tensor<?x64xbf16>')}}
  %y = mf.combine %r, %o tokens %t : !mf.dispatch, tensor<?x64xbf16> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// The expert outputs have the element type of the rows their dispatch sent.
func.func @combine_dispatch_element_type(%x: tensor<?x64xf32>, %i: tensor<?x2xi64>, %w: tensor<?x2xf32>, %o: tensor<?x64xbf16>, %t: index) -> tensor<?x64xbf16> {
  %rows, %local, %r = mf.dispatch %x, %i, %w on "experts" ["ep"] experts 32 flat : tensor<?x64xf32>, tensor<?x2xi64>, tensor<?x2xf32> -> tensor<?x64xf32>, tensor<?xi64>, !mf.dispatch
  // expected-error @+1 {{expert outputs 'tensor<?x64xbf16>' must have the element type of the dispatched rows ('tensor<?x64xf32>')}}
  %y = mf.combine %r, %o tokens %t : !mf.dispatch, tensor<?x64xbf16> -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// A send goes somewhere else.
func.func @send_zero(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{offset must not be 0}}
  mf.send %x to "attention" "pp" 0 : tensor<?x64xf32>
  return
}

// -----

// A receive needs the sizes of its dynamic dims.
func.func @recv_sizes() -> tensor<?x64xf32> {
  // expected-error @+1 {{needs one size per dynamic dimension of 'tensor<?x64xf32>', got 0}}
  %y = mf.recv from "attention" "pp" -1 : tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// The gather root is a group rank.
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @gather_root(%x: tensor<256xf32>) -> tensor<512xf32> {
    // expected-error @+1 {{root 2 is not a group rank}}
    %g = mf.gather %x on "attention" ["tp"] dim 0 root 2 : tensor<256xf32> -> tensor<512xf32>
    return %g : tensor<512xf32>
  }
}

// -----

// A coordinate along an axis the plan has not got.
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @coord_axis() -> index {
    // expected-error @+1 {{the experts mesh of the plan has no axis "tp"}}
    %c = mf.coord "experts" "tp" : index
    return %c : index
  }
}

// -----

// mf.step_rows deals rows along an axis the mesh has, as 1-D positions.
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @step_rows_axis(%pos: tensor<?xi64>) -> tensor<?xi64> {
    // expected-error @+1 {{the attention mesh of the plan has no axis "sp"}}
    %rows = mf.step_rows %pos on "attention" "sp" pad_to 2 : tensor<?xi64> -> tensor<?xi64>
    return %rows : tensor<?xi64>
  }
  func.func @step_rows_rank(%pos: tensor<?x2xi64>) -> tensor<?xi64> {
    // expected-error @+1 {{maps 1-D positions to 1-D row indices}}
    %rows = mf.step_rows %pos on "attention" "cp" pad_to 2 : tensor<?x2xi64> -> tensor<?xi64>
    return %rows : tensor<?xi64>
  }
}
