/*
The job's own transport: the whole world on host memory (cp/comm_mpi.h), for the
collectives of train/ (the checks that ranks agree, which checkpoint to resume,
the barriers around a checkpoint, the peak-memory line). Its waits are watched as
the ring's are (GPT2CP_TIMEOUT, cp/comm_watchdog.h), so a rank that stops at a
checkpoint or a start-up check ends the job naming it, instead of hanging the
others in a bare MPI call. Made once by train_runtime_init (train/agree.h); it
lives as long as the job.
*/
#ifndef TRAIN_JOB_COMM_H
#define TRAIN_JOB_COMM_H

#include "../cp/comm_mpi.h"
#include "../llmc/utils.h"

static Comm *job_comm_instance;

static void job_comm_init(void) {
    MPI_Comm world;
    COMM_BLOCKING("MPI_Comm_dup", MPI_Comm_dup(MPI_COMM_WORLD, &world));
    job_comm_instance = comm_mpi_create(world);
}

static Comm *job_comm(void) {
    if (job_comm_instance == NULL) { fatal("the job's transport is used before train_runtime_init"); }
    return job_comm_instance;
}

// The end of the job: a watched barrier (a rank that does not come is named), then
// MPI's own end (mpi_runtime_finalize).
static void job_comm_finalize(void) {
    job_comm()->barrier(job_comm());
    job_comm_instance->destroy(job_comm_instance);
    job_comm_instance = NULL;
    mpi_runtime_finalize();
}

#endif // TRAIN_JOB_COMM_H
