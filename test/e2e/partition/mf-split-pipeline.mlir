// RUN: meshfold-import-hf %examples/seed/config.json --num-layers 2 -o %t.2.mlir
// RUN: meshfold-opt %t.2.mlir | FileCheck %s --check-prefix=BEFORE
// RUN: meshfold-opt %t.2.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-split-pipeline | FileCheck %s
// RUN: meshfold-opt %t.2.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-zigzag-cp --mf-shard-tp --mf-insert-sp --mf-split-pipeline | FileCheck %s --check-prefix=SP
// RUN: meshfold-opt %t.2.mlir --mf-set-plan="tp=2 cp=2 dp=8 pp=1" --mf-split-pipeline | FileCheck %s --check-prefix=PP1
// RUN: meshfold-import-hf %examples/seed/config.json --num-layers 4 -o %t.4.mlir
// RUN: meshfold-opt %t.4.mlir --mf-set-plan="tp=2 cp=2 dp=2 pp=4" --mf-split-pipeline | FileCheck %s --check-prefix=PP4
// RUN: meshfold-import-hf %examples/seed/config.json --num-layers 3 -o %t.3.mlir
// RUN: not meshfold-opt %t.3.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-split-pipeline 2>&1 | FileCheck %s --check-prefix=ERR

// -mf-split-pipeline cuts the layers into PP stages, one private function per
// stage, and turns the entry into a switch on the rank's pp coordinate. Input:
// the seed model imported with 2 (PP=2, PP=1), 4 (PP=4) and 3 (error) layers.

// Before: one entry with the embedding, both layers and the head.
// BEFORE-LABEL: func.func @prefill(
// BEFORE:         %[[POS:.+]] = moe.positions
// BEFORE:         %[[EMB:.+]] = moe.embed
// BEFORE:         %[[L0:.+]] = moe.layer 0(%[[EMB]], %[[POS]])
// BEFORE:         %[[L1:.+]] = moe.layer 1(%[[L0]], %[[POS]])
// BEFORE:         moe.lm_head
// BEFORE:         moe.logits
// BEFORE-NOT:     func.func

// PP=2: the entry only dispatches to the rank's stage.
// CHECK-LABEL: func.func @prefill(
// CHECK-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>)
// CHECK-NOT:       moe.
// CHECK:           %[[PP:.+]] = mf.coord "attention" "pp" : index
// CHECK:           scf.index_switch %[[PP]]{{ *$}}
// CHECK-NEXT:      case 0 {
// CHECK-NEXT:        func.call @prefill_stage0(%[[TOK]]) : (tensor<?xi64>) -> ()
// CHECK:           case 1 {
// CHECK-NEXT:        func.call @prefill_stage1(%[[TOK]]) : (tensor<?xi64>) -> ()
// CHECK:           default {
// CHECK-NOT:       moe.
// CHECK:           return

// Stage 0: embedding and layer 0, then one send of the residual to pp+1; no head.
// CHECK-LABEL: func.func private @prefill_stage0(
// CHECK-NOT:       mf.recv
// CHECK:           %[[POS0:.+]] = moe.positions
// CHECK:           %[[EMB:.+]] = moe.embed
// CHECK:           %[[L0:.+]] = moe.layer 0(%[[EMB]], %[[POS0]])
// CHECK-NOT:       moe.layer 1
// CHECK-NOT:       moe.lm_head
// CHECK:           moe.yield
// CHECK-NEXT:      }
// CHECK-NEXT:      mf.send %[[L0]] to "attention" "pp" 1 : tensor<?x64xf32>
// CHECK-NEXT:      return
// CHECK-NOT:       mf.send
// CHECK-NOT:       "model.norm.weight"
// CHECK-NOT:       "lm_head.weight"
// CHECK-NOT:       moe.lm_head
// CHECK-NOT:       moe.logits

// Stage 1: one receive from pp-1 sized by the positions, layer 1 and the head.
// CHECK-LABEL: func.func private @prefill_stage1(
// CHECK-NOT:       moe.embed
// CHECK:           %[[POS1:.+]] = moe.positions
// CHECK-NOT:       moe.embed
// CHECK:           %[[T:.+]] = tensor.dim %[[POS1]], %{{.+}} : tensor<?xi64>
// CHECK-NEXT:      %[[H:.+]] = mf.recv from "attention" "pp" -1[%[[T]]] : tensor<?x64xf32>
// CHECK-NOT:       mf.recv
// CHECK-NOT:       moe.layer 0
// CHECK:           %[[L1:.+]] = moe.layer 1(%[[H]], %[[POS1]])
// CHECK:           %[[N:.+]] = moe.rms_norm %[[L1]],
// CHECK:           %[[LOG:.+]] = moe.lm_head %[[N]],
// CHECK:           moe.logits %[[LOG]] : tensor<512xf32>
// CHECK-NOT:       mf.send
// CHECK-NOT:       "model.embed_tokens.weight"
// CHECK:           return

// With the token passes first, the boundary carries the rank's SP rows: the
// receive is sized by the sliced (T/(CP*TP)) positions.
// SP-LABEL: func.func private @prefill_stage0(
// SP:         %[[L0:.+]] = moe.layer 0(
// SP:         mf.send %[[L0]] to "attention" "pp" 1 : tensor<?x64xf32>
// SP-LABEL: func.func private @prefill_stage1(
// SP:         %[[ZZ:.+]] = mf.zigzag_positions
// SP:         %[[SPPOS:.+]] = mf.slice %[[ZZ]] on "attention" ["tp"] dim 0
// SP:         %[[T:.+]] = tensor.dim %[[SPPOS]], %{{.+}} : tensor<?xi64>
// SP:         %[[H:.+]] = mf.recv from "attention" "pp" -1[%[[T]]] : tensor<?x64xf32>
// SP:         moe.layer 1(%[[H]], %[[SPPOS]], %[[ZZ]])

// PP=1: no stages, the entry keeps everything.
// PP1-LABEL: func.func @prefill(
// PP1-NOT:     scf.index_switch
// PP1-NOT:     mf.coord
// PP1:         moe.embed
// PP1:         moe.layer 0
// PP1:         moe.layer 1
// PP1:         moe.lm_head
// PP1:         moe.logits
// PP1-NOT:     mf.send
// PP1-NOT:     mf.recv
// PP1-NOT:     func.func

// PP=4 on 4 layers: middle stages both receive and send.
// PP4-LABEL: func.func @prefill(
// PP4:         case 3 {
// PP4-NEXT:      func.call @prefill_stage3
// PP4-LABEL: func.func private @prefill_stage0(
// PP4:         moe.embed
// PP4:         moe.layer 0(
// PP4-NOT:     moe.layer
// PP4:         mf.send %{{.+}} to "attention" "pp" 1
// PP4-LABEL: func.func private @prefill_stage1(
// PP4-NOT:     moe.embed
// PP4:         %[[H1:.+]] = mf.recv from "attention" "pp" -1
// PP4:         %[[O1:.+]] = moe.layer 1(%[[H1]],
// PP4-NOT:     moe.lm_head
// PP4:         mf.send %[[O1]] to "attention" "pp" 1
// PP4-LABEL: func.func private @prefill_stage2(
// PP4-NOT:     moe.embed
// PP4:         %[[H2:.+]] = mf.recv from "attention" "pp" -1
// PP4:         %[[O2:.+]] = moe.layer 2(%[[H2]],
// PP4-NOT:     moe.lm_head
// PP4:         mf.send %[[O2]] to "attention" "pp" 1
// PP4-LABEL: func.func private @prefill_stage3(
// PP4-NOT:     moe.embed
// PP4:         %[[H3:.+]] = mf.recv from "attention" "pp" -1
// PP4:         moe.layer 3(%[[H3]],
// PP4:         moe.lm_head
// PP4:         moe.logits
// PP4-NOT:     mf.send

// PP=2 does not divide 3 layers.
// ERR: error: plan rule 'pp-layers': PP=2 must divide the number of layers (3)
