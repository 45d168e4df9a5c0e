# comm/ fault tests: a rank killed with SIGKILL, and a stuck rank caught by the CommEngine
# watchdog. Include from tests/CMakeLists.txt with
#   include(${CMAKE_CURRENT_SOURCE_DIR}/mpi/CMakeLists.extra.cmake)
add_executable(comm_fault_driver ${CMAKE_CURRENT_LIST_DIR}/comm_fault_driver.cpp)
target_link_libraries(comm_fault_driver PRIVATE ringstep_comm)
foreach(case "kill;2" "kill;3" "hang;2")
  list(GET case 0 mode)
  list(GET case 1 np)
  add_test(NAME comm_fault.${mode}.np${np}
    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/comm_fault_test.sh ${MPIEXEC_EXECUTABLE}
            $<TARGET_FILE:comm_fault_driver> ${np} ${mode} 60)
  set_tests_properties(comm_fault.${mode}.np${np} PROPERTIES TIMEOUT 120
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
endforeach()
