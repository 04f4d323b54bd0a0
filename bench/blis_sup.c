/* blis_sup.c -- what turning BLIS's small-matrix ("sup") path off costs (engine/compute/blas.c turns it off: on
 * AVX2 kernel sets its kernels sum in another order, so results depended on chunking and threads).
 * Times one-thread sgemm at the shapes a sweep multiplies, sup off and on, best of 5, and whether
 * the two give the same bits. Build and run: see bench/README.md, "BLIS's small-matrix path". */
#include <blis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(void){
  int shapes[][3]={{128,16,128},{128,128,16},{512,128,128},{512,512,128},{4096,128,128},{4096,512,128},{4096,128,512},{4096,256,128}};
  for(size_t s=0;s<sizeof shapes/sizeof*shapes;s++){
    int m=shapes[s][0],n=shapes[s][1],k=shapes[s][2];
    float *a=malloc(4L*m*k),*b=malloc(4L*k*n),*c1=calloc(m*n,4),*c2=calloc(m*n,4);
    srand(1);for(long i=0;i<(long)m*k;i++)a[i]=rand()/(float)RAND_MAX-.5f;for(long i=0;i<(long)k*n;i++)b[i]=rand()/(float)RAND_MAX-.5f;
    double best[2]={1e9,1e9};
    for(int sup=0;sup<2;sup++){ rntm_t r; bli_rntm_init(&r); bli_rntm_set_num_threads(1,&r); bli_rntm_set_l3_sup(sup,&r);
      float one=1,zero=0; float *c=sup?c2:c1;
      int reps= (int)(2e8/((double)m*n*k))+1;
      for(int t=0;t<5;t++){double t0=now(); for(int r2=0;r2<reps;r2++) bli_sgemm_ex(BLIS_NO_TRANSPOSE,BLIS_NO_TRANSPOSE,m,n,k,&one,a,k,1,b,n,1,&zero,c,n,1,NULL,&r); double dt=(now()-t0)/reps; if(dt<best[sup])best[sup]=dt;}
    }
    int same=memcmp(c1,c2,4L*m*n)==0;
    printf("%5d x %4d x %4d  sup off %8.1f us  sup on %8.1f us  ratio on/off %.2f  bits %s\n",m,n,k,best[0]*1e6,best[1]*1e6,best[1]/best[0],same?"same":"DIFFER");
  }
  printf("arch %s\n", bli_arch_string(bli_arch_query_id()));
}
