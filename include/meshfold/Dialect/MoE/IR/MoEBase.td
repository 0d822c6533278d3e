//===- MoEBase.td - MoE dialect definition -----------------*- tablegen -*-===//
//
// The `moe` dialect: a Mixture-of-Experts transformer on global shapes.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_DIALECT_MOE_IR_MOEBASE_TD
#define MESHFOLD_DIALECT_MOE_IR_MOEBASE_TD

include "mlir/IR/OpBase.td"

def MoE_Dialect : Dialect {
  let name = "moe";
  let cppNamespace = "::meshfold::moe";
  let summary = "Mixture-of-Experts transformer model ops on global shapes";
  let description = [{
    Coarse ops of a decoder-only MoE transformer (Mixtral conventions) whose
    partitioning rules are known: weights by Hugging Face name, embedding,
    RMSNorm, linear layers (`[out, in]` weights), RoPE on global positions,
    causal GQA attention, the top-k router, SwiGLU experts and the LM head.
    Shapes are global: the token dimension is dynamic (`?`), everything else
    static. Partitioning passes turn these into per-rank local shapes.
  }];
  let dependentDialects = ["::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect"];
}

class MoE_Op<string mnemonic, list<Trait> traits = []>
    : Op<MoE_Dialect, mnemonic, traits>;

#endif // MESHFOLD_DIALECT_MOE_IR_MOEBASE_TD
