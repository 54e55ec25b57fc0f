from ptxbench.cli import main

main()
