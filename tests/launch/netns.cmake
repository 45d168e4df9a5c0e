# ringstep across namespace hosts (launch/testhosts; tests/launch/netns_test.py): label
# `netns`. Each test makes its own hosts on its own subnet and skips (exit 77) with the reason
# where namespace hosts cannot be made (not root, no ip netns). They take turns (resource
# lock): two jobs launched across two sets of hosts at once have hung at start-up, a daemon
# missing, before each host had its own TMPDIR (docs/launch.md).
if(Python3_Interpreter_FOUND)
  foreach(case "collectives;2" "collectives;4" "losses;2" "linkcut;2" "sigterm;2" "slowlink;2")
    list(GET case 0 what)
    list(GET case 1 np)
    set(name netns.${what})
    if(what STREQUAL "collectives")
      set(name netns.${what}.np${np})
    endif()
    add_test(NAME ${name}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/netns_test.py
              $<TARGET_FILE:ringstep> $<TARGET_FILE_DIR:ring_allreduce_mpitest> ${what} ${np})
    set_tests_properties(${name} PROPERTIES LABELS netns TIMEOUT 150 SKIP_RETURN_CODE 77
      PROCESSORS ${np} RESOURCE_LOCK netns_hosts)
  endforeach()
endif()
