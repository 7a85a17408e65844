const { Tokenizer } = require('tokenizers');
const tok = Tokenizer.fromString(JSON.stringify({version:"1.0",truncation:null,padding:null,added_tokens:[],normalizer:null,
 pre_tokenizer:{type:"WhitespaceSplit"},post_processor:null,decoder:null,
 model:{type:"WordLevel",vocab:{"a":0,"b":1,"[UNK]":2},unk_token:"[UNK]"}}));
(async()=>{
 for (const max of [13, 12, 7]) {
  tok.setTruncation(max, {strategy:'LongestFirst'});
  const out=[];
  for (const [n1,n2] of [[28,21],[29,20],[29,26],[20,18],[23,34],[10,10],[3,20],[20,3],[8,8],[9,4],[4,9],[7,7]]) {
    const e = await tok.encode(Array(n1).fill('a').join(' '), Array(n2).fill('b').join(' '));
    const ids=e.getIds(); out.push(`${n1},${n2}->${ids.filter(x=>x==0).length},${ids.filter(x=>x==1).length}`);
  }
  console.log(max, out.join('  '));
 }
})();
