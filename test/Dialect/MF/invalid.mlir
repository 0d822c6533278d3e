// RUN: meshfold-opt %s -split-input-file -verify-diagnostics

// Parser and attribute-verifier errors of the mf dialect: #mf.plan, the
// mf.plan module attribute, other mf attributes and mf.weight.

// A plan field the parser does not know.
// expected-error @+1 {{unknown #mf.plan field 'tensor_parallel' (expected devices, gpus_per_node, nvlink_gbps, ib_gbps, attention, experts)}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4, tensor_parallel = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
}

// -----

// A plan without gpus_per_node.
// expected-error @+1 {{#mf.plan needs the field 'gpus_per_node'}}
module attributes {mf.plan = #mf.plan<devices = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
}

// -----

// A plan without the expert mesh.
// expected-error @+1 {{#mf.plan needs the field 'experts'}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4]>} {
}

// -----

// A field given twice.
// expected-error @+2 {{#mf.plan field 'attention' given twice}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2], attention = [cp = 2], experts = [ep = 4 : (tp)]>} {
}

// -----

// An expert axis must name its attention parts.
// expected-error @+2 {{expert axis 'ep' must list the attention axes it is made of}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : ()]>} {
}

// -----

// An axis needs a size.
// expected-error @+2 {{expected '='}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp], experts = [ep = 4 : (tp)]>} {
}

// -----

// The mf.plan attribute must hold a plan.
// expected-error @+1 {{'mf.plan' must be an #mf.plan, got 32 : i64}}
module attributes {mf.plan = 32} {
}

// -----

// The mf dialect has no other discardable attributes.
// expected-error @+1 {{unknown mf attribute 'mf.mesh'}}
module attributes {mf.mesh = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
}

// -----

// A weight id is non-negative (attribute constraint).
func.func @weight_negative_id() -> memref<64xf32> {
  // expected-error @+1 {{attribute 'id' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  %0 = mf.weight -1, "model.norm.weight" : memref<64xf32>
  return %0 : memref<64xf32>
}

// -----

// A weight buffer has a static shape (type constraint).
func.func @weight_dynamic() -> memref<?xf32> {
  // expected-error @+1 {{result #0 must be statically shaped memref of any type values}}
  %0 = mf.weight 0, "model.norm.weight" : memref<?xf32>
  return %0 : memref<?xf32>
}

// -----

// mf.kv_rows names K (0) or V (1).
func.func @kv_rows_tensor(%rows: index, %first: i64) -> memref<?x2x8xf32> {
  // expected-error @+1 {{attribute 'tensor' failed to satisfy constraint}}
  %0 = mf.kv_rows %rows, %first {layer = 0 : i64, tensor = 2 : i64} : memref<?x2x8xf32>
  return %0 : memref<?x2x8xf32>
}

// -----

// The plan belongs on the module.
// expected-error @+1 {{'mf.plan' belongs on the module, not on 'func.func'}}
func.func @f() attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
  return
}
