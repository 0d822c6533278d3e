// RUN: not meshfold-opt %s --mf-set-plan="tp=0" 2>&1 | FileCheck %s --check-prefix=AXIS-SIZE
// RUN: not meshfold-opt %s --mf-set-plan="tp=2 pp=0" 2>&1 | FileCheck %s --check-prefix=PP-SIZE
// RUN: not meshfold-opt %s --mf-set-plan="tp=2 ep=4" 2>&1 | FileCheck %s --check-prefix=EP-SIZE
// RUN: not meshfold-opt %s --mf-set-plan="order=tp,cp,dp" 2>&1 | FileCheck %s --check-prefix=ORDER-LACKS
// RUN: not meshfold-opt %s --mf-set-plan="order=tp,sp,dp,pp" 2>&1 | FileCheck %s --check-prefix=ORDER-UNKNOWN
// RUN: not meshfold-opt %s --mf-set-plan="order=tp,cp,dp,dp" 2>&1 | FileCheck %s --check-prefix=ORDER-TWICE
// RUN: not meshfold-opt %s --mf-set-plan="tp=4 dp=3" 2>&1 | FileCheck %s --check-prefix=NODE-DIVIDE
// RUN: not meshfold-opt %s --mf-set-plan="tp=4 gpus-per-node=0" 2>&1 | FileCheck %s --check-prefix=NODE-ZERO

// -mf-set-plan rejects options that make no valid plan, with the rule they
// break, on the module. One RUN line per rule.

// axis-size: every size is at least 1.
// AXIS-SIZE: error: plan rule 'axis-size': axis 'tp' has size 0, but sizes must be >= 1
// PP-SIZE: error: plan rule 'axis-size': axis 'pp' has size 0, but sizes must be >= 1

// mesh-size: EP is the product of the non-pp axes.
// EP-SIZE: error: plan rule 'mesh-size': etp*ep*edp = 1*4*1 = 4 must equal tp*cp*dp = 2*1*1 = 2

// fold / duplicate-axis: the order is a permutation of tp, cp, dp and pp.
// ORDER-LACKS: error: plan rule 'fold': axis order 'tp,cp,dp' lacks 'pp' (expected a permutation of tp,cp,dp,pp)
// ORDER-UNKNOWN: error: plan rule 'fold': axis order 'tp,sp,dp,pp' names 'sp', which is not an attention axis (expected a permutation of tp,cp,dp,pp)
// ORDER-TWICE: error: plan rule 'duplicate-axis': axis order 'tp,cp,dp,dp' names 'dp' twice

// node-size: 12 devices do not fill nodes of 8; a node has at least one GPU.
// NODE-DIVIDE: error: plan rule 'node-size': 8 GPUs per node do not divide 12 devices
// NODE-ZERO: error: plan rule 'node-size': gpus per node is 0, but must be >= 1
module {
}
