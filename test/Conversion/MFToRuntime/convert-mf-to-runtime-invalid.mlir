// RUN: meshfold-opt %s -split-input-file --convert-mf-to-runtime -verify-diagnostics

// -convert-mf-to-runtime rejects what the CPU runtime cannot move: tensors
// other than f32 (i64 too for ring steps), splits and joins along a dim other
// than 0, dynamic dims past the first, and routing that does not go from a
// dispatch to its combine. The errors sit on the op.

// The module's plan must pass the plan rules.
// expected-error @+1 {{plan rule 'mesh-size': attention mesh axes multiply to 2, but the plan has 4 devices}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2], experts = [ep = 4 : (tp)]>} {
}

// -----

module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  // The collectives move f32 rows.
  func.func @bf16(%x: tensor<?x8xbf16>) -> tensor<?x8xbf16> {
    // expected-error @+1 {{the CPU runtime moves f32 tensors here, got 'tensor<?x8xbf16>'}}
    %0 = mf.all_gather %x on "attention" ["tp"] dim 0 : tensor<?x8xbf16> -> tensor<?x8xbf16>
    return %0 : tensor<?x8xbf16>
  }
}

// -----

module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  // The runtime joins along dim 0 only.
  func.func @dim1(%x: tensor<?x4xf32>) -> tensor<?x8xf32> {
    // expected-error @+1 {{the runtime splits and joins along dim 0 only, got dim 1}}
    %0 = mf.all_gather %x on "attention" ["tp"] dim 1 : tensor<?x4xf32> -> tensor<?x8xf32>
    return %0 : tensor<?x8xf32>
  }
}

// -----

module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  // Only the leading dim may be dynamic.
  func.func @dynamic_inner(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {
    // expected-error @+1 {{only the leading dim may be dynamic: 'tensor<?x?xf32>'}}
    %0 = mf.reduce_scatter %x on "attention" ["tp"] dim 0 : tensor<?x?xf32> -> tensor<?x?xf32>
    return %0 : tensor<?x?xf32>
  }
}

// -----

module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  // Each tensor of a grouped all-reduce is checked.
  func.func @all_reduce_f16(%x: tensor<?x8xf32>, %f: tensor<1xf16>) -> (tensor<?x8xf32>, tensor<1xf16>) {
    // expected-error @+1 {{the CPU runtime moves f32 tensors here, got 'tensor<1xf16>'}}
    %0:2 = mf.all_reduce %x, %f on "attention" ["tp"] : tensor<?x8xf32>, tensor<1xf16> -> tensor<?x8xf32>, tensor<1xf16>
    return %0#0, %0#1 : tensor<?x8xf32>, tensor<1xf16>
  }
}

// -----

module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [dp = 1, pp = 2], experts = [ep = 1 : (dp), pp = 2 : (pp)]>} {
  // Pipeline sends carry f32 rows.
  func.func @send_i64(%x: tensor<?xi64>) {
    // expected-error @+1 {{the CPU runtime moves f32 tensors here, got 'tensor<?xi64>'}}
    mf.send %x to "attention" "pp" 1 : tensor<?xi64>
    return
  }
}

// -----

module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [cp = 2], experts = [ep = 2 : (cp)]>} {
  // Ring steps carry f32 and i64 tensors.
  func.func @ring_i32(%x: tensor<?xi32>) -> tensor<?xi32> {
    // expected-error @+1 {{convert-mf-to-runtime: ring steps carry f32 and i64 tensors, got 'tensor<?xi32>'}}
    %0 = mf.ring_step %x on "attention" ["cp"] : tensor<?xi32> -> tensor<?xi32>
    return %0 : tensor<?xi32>
  }
}

// -----

module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [cp = 2], experts = [ep = 2 : (cp)]>} {
  // A mix of tensors that no runtime entry point of CodegenABI.def carries.
  func.func @ring_pair(%k: tensor<?x8xf32>, %v: tensor<?x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
    // expected-error @+1 {{convert-mf-to-runtime: the runtime has no ring step for these tensors (mfrt_cg_ring_step_f32_f32)}}
    %0:2 = mf.ring_step %k, %v on "attention" ["cp"] : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>, tensor<?x8xf32>
    return %0#0, %0#1 : tensor<?x8xf32>, tensor<?x8xf32>
  }
}

// -----

module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [cp = 2], experts = [ep = 2 : (cp)]>} {
  // At most four tensors travel in one ring step.
  func.func @ring_five(%k: tensor<?x8xf32>) -> tensor<?x8xf32> {
    // expected-error @+1 {{convert-mf-to-runtime: at most 4 tensors per ring step}}
    %0:5 = mf.ring_step %k, %k, %k, %k, %k on "attention" ["cp"] : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>
    return %0#0 : tensor<?x8xf32>
  }
}

// -----

module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [cp = 2], experts = [ep = 2 : (cp)]>} {
  // Only the combinations the runtime has travel together.
  func.func @ring_four_f32(%k: tensor<?x8xf32>) -> tensor<?x8xf32> {
    // expected-error @+1 {{convert-mf-to-runtime: the runtime has no ring step for these tensors (mfrt_cg_ring_step_f32_f32_f32_f32)}}
    %0:4 = mf.ring_step %k, %k, %k, %k on "attention" ["cp"] : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>
    return %0#0 : tensor<?x8xf32>
  }
}

// -----

module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  // Slices are cut along dim 0 only.
  func.func @slice_dim1(%x: tensor<?x8xf32>) -> tensor<?x4xf32> {
    // expected-error @+1 {{convert-mf-to-runtime: slices along dim 0 only}}
    %0 = mf.slice %x on "attention" ["tp"] dim 1 : tensor<?x8xf32> -> tensor<?x4xf32>
    return %0 : tensor<?x4xf32>
  }
}

// -----

module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  // mf.take is lowered for 1-D tensors (tokens) only.
  func.func @take_2d(%x: tensor<?x8xf32>, %i: tensor<?xi64>) -> tensor<?x8xf32> {
    // expected-error @+1 {{convert-mf-to-runtime: mf.take of 1-D tensors only}}
    %0 = mf.take %x[%i] fill 0 : tensor<?x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    return %0 : tensor<?x8xf32>
  }
}

// -----

module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  // Dispatch moves f32 rows with f32 routing weights.
  func.func @dispatch_bf16_weights(%x: tensor<?x8xf32>, %idx: tensor<?x2xi64>, %w: tensor<?x2xbf16>) -> tensor<?x8xf32> {
    // expected-error @+1 {{convert-mf-to-runtime: dispatch moves f32 rows}}
    %rows, %local, %r = mf.dispatch %x, %idx, %w on "experts" ["ep"] experts 4 flat : tensor<?x8xf32>, tensor<?x2xi64>, tensor<?x2xbf16> -> tensor<?x8xf32>, tensor<?xi64>, !mf.dispatch
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x8xf32>
    %y = mf.combine %r, %rows tokens %t : !mf.dispatch, tensor<?x8xf32> -> tensor<?x8xf32>
    return %y : tensor<?x8xf32>
  }
}

// -----

module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  // A routing handle lives inside the program: it may only feed mf.combine.
  func.func @routing_escapes(%x: tensor<?x8xf32>, %idx: tensor<?x2xi64>, %w: tensor<?x2xf32>) -> !mf.dispatch {
    %rows, %local, %r = mf.dispatch %x, %idx, %w on "experts" ["ep"] experts 4 flat : tensor<?x8xf32>, tensor<?x2xi64>, tensor<?x2xf32> -> tensor<?x8xf32>, tensor<?xi64>, !mf.dispatch
    // expected-error @+1 {{a dispatch's routing may only feed mf.combine}}
    return %r : !mf.dispatch
  }
}

// -----

module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  // A combine answers a dispatch of the same program.
  func.func @combine_alone(%r: !mf.dispatch, %out: tensor<?x8xf32>, %t: index) -> tensor<?x8xf32> {
    // expected-error @+1 {{mf.combine needs the mf.dispatch it answers}}
    %y = mf.combine %r, %out tokens %t : !mf.dispatch, tensor<?x8xf32> -> tensor<?x8xf32>
    return %y : tensor<?x8xf32>
  }
}
