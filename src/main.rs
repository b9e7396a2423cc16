fn main() {
    std::process::exit(tao_slurm::cli::run());
}
