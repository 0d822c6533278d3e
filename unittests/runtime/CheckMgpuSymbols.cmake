# Checks that libmfrt_cuda.a defines every mgpu* function that upstream MLIR's
# GPU lowering can call, and that a program linked against it leaves no mgpu*
# symbol undefined.
#
# The names: those the LLVM IR of Inputs/mgpu-calls.mlir and mgpu-tma.mlir
# declares after upstream's lowering (so a new call in a newer MLIR shows up
# here), plus the fixed list below (mgpuModuleLoad is emitted for cubin
# objects, which need ptxas to build).
#
#   cmake -DNM=nm -DLIB=libmfrt_cuda.a -DEXE=MgpuLinkTest -DMLIR_OPT=mlir-opt
#         -DMLIR_TRANSLATE=mlir-translate -DINPUT=.../mgpu-calls.mlir
#         -DWORK=dir -P CheckMgpuSymbols.cmake
set(names
  mgpuModuleLoad mgpuModuleLoadJIT mgpuModuleUnload mgpuModuleGetFunction
  mgpuLaunchKernel mgpuLaunchClusterKernel
  mgpuStreamCreate mgpuStreamDestroy mgpuStreamSynchronize mgpuStreamWaitEvent
  mgpuEventCreate mgpuEventDestroy mgpuEventSynchronize mgpuEventRecord
  mgpuMemAlloc mgpuMemFree mgpuMemcpy mgpuMemset32 mgpuMemset16
  mgpuMemHostRegister mgpuMemHostRegisterMemRef
  mgpuMemHostUnregister mgpuMemHostUnregisterMemRef
  mgpuSetDefaultDevice mgpuTensorMapEncodeTiledMemref)

file(MAKE_DIRECTORY ${WORK})
if(MLIR_OPT AND MLIR_TRANSLATE)
  execute_process(
    COMMAND ${MLIR_OPT} ${INPUT} --gpu-lower-to-nvvm-pipeline=cubin-format=isa
    COMMAND ${MLIR_OPT} --finalize-memref-to-llvm --reconcile-unrealized-casts
    COMMAND ${MLIR_TRANSLATE} --mlir-to-llvmir
    OUTPUT_VARIABLE ir ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "lowering ${INPUT} failed (${rc}): ${err}")
  endif()
  get_filename_component(dir ${INPUT} DIRECTORY)
  execute_process(
    COMMAND ${MLIR_OPT} ${dir}/mgpu-tma.mlir --convert-nvgpu-to-nvvm
            --gpu-to-llvm
    OUTPUT_VARIABLE tma ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "lowering mgpu-tma.mlir failed (${rc}): ${err}")
  endif()
  file(WRITE ${WORK}/mgpu-calls.ll "${ir}")
  string(REGEX MATCHALL "declare[^\n]*@mgpu[A-Za-z0-9_]+" decls "${ir}")
  string(REGEX MATCHALL "llvm.func @mgpu[A-Za-z0-9_]+" tmaDecls "${tma}")
  set(emitted "")
  foreach(d IN LISTS decls tmaDecls)
    string(REGEX MATCH "mgpu[A-Za-z0-9_]+" n "${d}")
    list(APPEND emitted ${n})
  endforeach()
  list(REMOVE_DUPLICATES emitted)
  list(LENGTH emitted count)
  if(count LESS 15)
    message(FATAL_ERROR "expected the lowering to call at least 15 mgpu "
                        "functions, found: ${emitted}")
  endif()
  message(STATUS "upstream lowering calls: ${emitted}")
  list(APPEND names ${emitted})
  list(REMOVE_DUPLICATES names)
else()
  message(STATUS "mlir-opt / mlir-translate not found: fixed list only")
endif()

# The symbol table of `file` (nm), into `out`.
function(symbols file out)
  execute_process(COMMAND ${NM} ${file} OUTPUT_VARIABLE syms
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} ${file} failed")
  endif()
  set(${out} "${syms}" PARENT_SCOPE)
endfunction()

symbols(${LIB} libSyms)
set(missing "")
foreach(n IN LISTS names)
  if(NOT libSyms MATCHES "[0-9a-f]+ T ${n}\n")
    list(APPEND missing ${n})
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "libmfrt_cuda.a does not define: ${missing}")
endif()

symbols(${EXE} exeSyms)
string(REGEX MATCHALL " U mgpu[A-Za-z0-9_]+" undefined "${exeSyms}")
if(undefined)
  message(FATAL_ERROR "unresolved in the linked program: ${undefined}")
endif()
foreach(n IN LISTS names)
  if(NOT exeSyms MATCHES " T ${n}\n")
    message(FATAL_ERROR "the linked program lacks ${n}")
  endif()
endforeach()
list(LENGTH names count)
message(STATUS "all ${count} mgpu functions defined, none unresolved")
