fn main() {
    std::process::exit(tao_slurm_cli::run());
}
